package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// errWaited notes a lease that another agent held for a while, and
// errTakenOver one waited for at least its time to live.
var (
	errWaited    = errors.New("waited for the lease")
	errTakenOver = errors.New("took the lease over")
)

// sharedLease is a Lease in a shared store: a key holding a random
// owner, renewed while it is held.
type sharedLease struct {
	s          *Shared
	key, owner string
	stop       chan struct{}
	done       chan struct{}
	// ended: released, or handed over to another Shared (Adopt).
	mu    sync.Mutex
	ended bool
}

// Acquire takes kind and id's lease, waiting while another agent holds it
// (it is released when that agent is done, or expires LeaseTTL after that
// agent stopped renewing it), until ctx ends. The caller re-reads the
// record once it holds the lease: the other agent may have just written it.
func (s *Shared) Acquire(ctx context.Context, kind, id string) (Lease, error) {
	_, key := s.keys(kind, id)
	b := make([]byte, 16)
	rand.Read(b)
	owner := hex.EncodeToString(b)
	wait := 20 * time.Millisecond
	waited, start := false, time.Now()
	for {
		var got bool
		err := s.bounded(ctx, func(ctx context.Context) (err error) {
			got, err = s.b.take(ctx, key, owner, s.leaseTTL)
			return err
		})
		if err != nil {
			s.note("acquire", err)
			return nil, err
		}
		if got {
			l := &sharedLease{s: s, key: key, owner: owner, stop: make(chan struct{}), done: make(chan struct{})}
			go l.renew()
			switch {
			case waited && time.Since(start) >= s.leaseTTL:
				// Its holder stopped renewing it (killed or paused), or
				// held it that long.
				s.note("acquire", errTakenOver)
			case waited:
				s.note("acquire", errWaited)
			default:
				s.note("acquire", nil)
			}
			return l, nil
		}
		waited = true
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			err := fmt.Errorf("%w: another agent held the lease until the deadline", ErrUnavailable)
			s.note("acquire", err)
			return nil, err
		case <-t.C:
		}
		wait = min(wait*2, 200*time.Millisecond)
	}
}

// renew extends the lease every third of its time to live until Release.
func (l *sharedLease) renew() {
	defer close(l.done)
	t := time.NewTicker(l.s.leaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.s.bounded(context.Background(), func(ctx context.Context) error {
				return l.s.b.renew(ctx, l.key, l.owner, l.s.leaseTTL)
			})
		}
	}
}

// end stops the renewal; false when the lease ended already.
func (l *sharedLease) end() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return false
	}
	l.ended = true
	close(l.stop)
	<-l.done
	return true
}

// Release gives the lease up (only if it is still this holder's); a lease
// handed over (Adopt) is the adopter's to release.
func (l *sharedLease) Release() {
	if !l.end() {
		return
	}
	l.s.bounded(context.Background(), func(ctx context.Context) error {
		return l.s.b.release(ctx, l.key, l.owner)
	})
}

// Adopt carries l, a lease another Shared on the same store took (a
// reload opened this one, and closes that one), over to s: s renews it
// from now on, and it is never given up in between, so that no other agent
// can take it meanwhile. The old Shared's Release of l does nothing after.
// ok is false when l is not a lease of a Shared, or ended already.
func (s *Shared) Adopt(l Lease) (Lease, bool) {
	old, ok := l.(*sharedLease)
	switch {
	case !ok:
		return nil, false
	case old.s == s:
		return l, true
	case !old.end():
		return nil, false
	}
	n := &sharedLease{s: s, key: old.key, owner: old.owner, stop: make(chan struct{}), done: make(chan struct{})}
	go n.renew()
	return n, true
}

// Obtain returns kind and id's value from the store when usable accepts
// it; otherwise it runs make under the identity's lease, after reading once
// more (another agent may have made it while this one waited for the
// lease), and keeps what make returns for the ttl it gives. fromStore
// reports that make did not run here. An error wrapping ErrUnavailable
// means the store could not be used (the caller may make the value
// itself); any other error is make's. A value that is not to be used
// (ErrSealed: it does not open, is over the bound, or is a rollback) is
// treated as absent: make's value replaces it.
func Obtain(ctx context.Context, r Records, kind, id string, usable func([]byte) bool,
	make func(context.Context) ([]byte, time.Duration, error)) (value []byte, fromStore bool, err error) {
	read := func() ([]byte, error) {
		v, err := r.Get(ctx, kind, id)
		switch {
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrSealed):
			return nil, nil
		case err != nil:
			return nil, err
		case !usable(v):
			return nil, nil
		}
		return v, nil
	}
	if v, err := read(); err != nil || v != nil {
		return v, v != nil, err
	}
	l, err := r.Acquire(ctx, kind, id)
	if err != nil {
		return nil, false, err
	}
	defer l.Release()
	if v, err := read(); err != nil || v != nil {
		return v, v != nil, err
	}
	v, ttl, err := make(ctx)
	if err != nil {
		return nil, false, err
	}
	// A value that could not be kept is still good here; the other agents
	// make their own.
	_ = r.Put(ctx, kind, id, v, ttl, l)
	return v, false, nil
}

// DeleteIf removes kind and id's value, under the identity's lease, when
// match accepts it (a token the service refused, one older than a floor);
// it reports whether it removed one.
func DeleteIf(ctx context.Context, r Records, kind, id string, match func([]byte) bool) (bool, error) {
	l, err := r.Acquire(ctx, kind, id)
	if err != nil {
		return false, err
	}
	defer l.Release()
	v, err := r.Get(ctx, kind, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case errors.Is(err, ErrSealed):
		return true, r.Delete(ctx, kind, id, l) // never to be used: gone
	case err != nil:
		return false, err
	case !match(v):
		return false, nil
	}
	return true, r.Delete(ctx, kind, id, l)
}
