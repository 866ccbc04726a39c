package trusted

import (
	"context"
	"sync"
	"time"
)

// stamps hands out step-1 timestamps so that this client never sends the
// same signed request twice. The text holds only the API key, the
// credential and a timestamp to the second, and an RSA PKCS#1 v1.5
// signature is deterministic: two requests for one user in one second
// would be byte for byte the same, and a service that refuses replays (the
// emulator does) would refuse the second. The second one waits for the
// next second instead.
type stamps struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// A retry of a request (retry is the timestamp it was sent with) may be
// the same request again: it does not wait.
func (s *stamps) next(ctx context.Context, now func() time.Time, key string, retry time.Time) (time.Time, error) {
	s.mu.Lock()
	if s.last == nil {
		s.last = map[string]time.Time{}
	}
	t := now().UTC()
	ts := t.Truncate(time.Second)
	if !retry.IsZero() && !ts.After(retry) {
		s.mu.Unlock()
		return retry, nil
	}
	if prev, ok := s.last[key]; ok && !ts.After(prev) {
		ts = prev.Add(time.Second)
	}
	s.last[key] = ts
	if len(s.last) > 1024 {
		for k, v := range s.last {
			if t.Sub(v) > 2*time.Second {
				delete(s.last, k)
			}
		}
	}
	s.mu.Unlock()
	// Wait until the timestamp is not in the future (never longer than the
	// time a burst for one user has got ahead of the clock).
	if wait := ts.Sub(t); wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
	return ts, nil
}
