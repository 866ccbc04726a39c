package trusted

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/errdefs"
)

// ErrTooSoon is returned when the texts for one API key and credential
// have used up the seconds a caller may wait for: try again in a moment.
var ErrTooSoon = errdefs.New(errdefs.ErrTryAgain, "too many signed texts for one credential at once")

// MaxStampWait bounds how far ahead of the clock Stamps goes for a second
// of its own (and so how long Next waits).
const MaxStampWait = 5 * time.Second

// Stamps hands out the timestamps of step-1 texts so that a process never
// sends a text it has sent or handed out before. The text holds only the
// API key, the credential's value and a timestamp to the second (not the
// serviceUserId), and an RSA PKCS#1 v1.5 signature is deterministic: two
// texts for one credential in one second are byte for byte the same, and
// the service refuses the second as a signature it has already seen
// (SignatureReused). So a text this process sends (Next, for sessions)
// takes a second of its own per API key and credential, waiting for the
// next free second when this one is taken; a text handed to a caller
// (Handout, Note: the agent's /v1/signatures) avoids the seconds sent, and
// is avoided by later sends.
//
// One Stamps serves every client of a process that signs with the same
// key (the agent's sessions across reloads, and its /v1/signatures). Two
// processes cannot coordinate; the service's refusal then names the cause
// (see Explain). The zero value is ready to use.
type Stamps struct {
	mu   sync.Mutex
	used map[[sha256.Size]byte]map[int64]use // text without its timestamp -> Unix second -> how it was used
}

// use says how a second was used for a text.
type use uint8

const (
	sent   use = 1 << iota // signed and sent by this process
	handed                 // signed and handed to a caller, who may send it
)

// NewStamps returns an empty Stamps.
func NewStamps() *Stamps { return &Stamps{} }

// stampKey is the text without its timestamp.
func stampKey(apiKey string, cred canonical.Credential) [sha256.Size]byte {
	return sha256.Sum256([]byte("apikey=" + strings.ToLower(apiKey) + "\r\nid=" + cred.Value + "\r\n"))
}

// Next returns the timestamp for a text of apiKey and cred that this
// process will send: now to the second, or the first later second not yet
// used for them, after waiting until that second has come (ErrTooSoon
// when that is more than MaxStampWait away; the context's error when it
// ends first).
func (s *Stamps) Next(ctx context.Context, now func() time.Time, apiKey string, cred canonical.Credential) (time.Time, error) {
	return s.next(ctx, now, stampKey(apiKey, cred), cred, time.Time{})
}

// Handout returns the timestamp for a text of apiKey and cred handed to a
// caller, and records it: now to the second, or, when this process has
// sent a text in this second, the first later second it has not (a second
// or so ahead, well inside the service's clock skew; no wait). Texts
// handed out in one second are the same text.
func (s *Stamps) Handout(now func() time.Time, apiKey string, cred canonical.Credential) time.Time {
	t := now().UTC().Truncate(time.Second)
	key := stampKey(apiKey, cred)
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := t
	for s.used[key][ts.Unix()]&sent != 0 {
		ts = ts.Add(time.Second)
	}
	s.mark(key, ts, t, handed)
	return ts
}

// Note records a timestamp a caller chose for a text handed to it, so
// that this process does not send that text itself. Only seconds from now
// to MaxStampWait ahead are kept: Next never goes back to a past one, and
// a text stamped further ahead that meets one of ours is refused by the
// service and signed again (Client.Authenticate's retry).
func (s *Stamps) Note(now func() time.Time, apiKey string, cred canonical.Credential, ts time.Time) {
	t := now().UTC().Truncate(time.Second)
	if ts.Before(t) || ts.Sub(t) > MaxStampWait {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mark(stampKey(apiKey, cred), ts, t, handed)
}

// next is Next; a retry (retry is the timestamp its request was sent
// with) in the same second may send the same request again, and does not
// wait.
func (s *Stamps) next(ctx context.Context, now func() time.Time, key [sha256.Size]byte, cred canonical.Credential, retry time.Time) (time.Time, error) {
	t := now().UTC()
	ts := t.Truncate(time.Second)
	if !retry.IsZero() && !ts.After(retry) {
		return retry, nil
	}
	s.mu.Lock()
	for s.used[key][ts.Unix()] != 0 {
		ts = ts.Add(time.Second)
	}
	wait := ts.Sub(t)
	if wait > MaxStampWait {
		s.mu.Unlock()
		return time.Time{}, fmt.Errorf("%w: the next free second for %s is %v away; try again in a few seconds", ErrTooSoon, cred.Masked(), wait.Round(time.Second))
	}
	s.mark(key, ts, t.Truncate(time.Second), sent)
	s.mu.Unlock()
	if wait > 0 {
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

// mark records ts as used for key and forgets seconds before now; the
// caller holds s.mu.
func (s *Stamps) mark(key [sha256.Size]byte, ts, now time.Time, how use) {
	if s.used == nil {
		s.used = map[[sha256.Size]byte]map[int64]use{}
	}
	if len(s.used) > 1024 {
		for k, secs := range s.used {
			forget(secs, now)
			if len(secs) == 0 {
				delete(s.used, k)
			}
		}
	}
	secs := s.used[key]
	if secs == nil {
		secs = map[int64]use{}
		s.used[key] = secs
	}
	forget(secs, now)
	secs[ts.Unix()] |= how
}

// forget drops the seconds before now.
func forget(secs map[int64]use, now time.Time) {
	for sec := range secs {
		if sec < now.Unix() {
			delete(secs, sec)
		}
	}
}
