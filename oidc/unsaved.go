package oidc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/signagent/signagent/store"
)

// A refreshed record the store did not take (it went down, or stopped
// taking writes, between the lease and the write) holds the only live
// refresh token of its grant: the provider has spent the one the store
// still holds, and a provider that sees a spent one again revokes the
// whole grant (RFC 9700 4.14.2), signing the user out everywhere. Such a
// record is kept here, served from memory, never refreshed from the
// store's copy, and offered to the store every retryUnsavedEvery until it
// takes it, under the lease the refresh took: it is held (and renewed)
// until the record is written, so that no other agent refreshes from the
// store's spent copy meanwhile, and the record is written only over the
// one it replaced. A reload hands the records over to the Tokens that
// replaces this one (TakeOver), leases included.

// unsaved is a refreshed record not yet in the store, the refresh token of
// the record it replaces there, and what gives up the profile's lease
// held since the refresh (nil: none held; the writer takes one).
type unsaved struct {
	rec      *Record
	replaces string
	unlock   func()
}

// retryUnsavedEvery is how often an unsaved record is offered to the
// store again.
const retryUnsavedEvery = 250 * time.Millisecond

// errNoRecord marks a Load that found no record (signed out): an unsaved
// record is dropped only then, or when the store's record is another one.
var errNoRecord = errors.New("no record")

type noRecord struct{ error }

func (e noRecord) Unwrap() []error { return []error{e.error, errNoRecord} }

// keepUnsaved keeps u until the store takes it, and starts the writer
// when none runs. A Tokens a reload replaced hands u on to its successor.
func (t *Tokens) keepUnsaved(profile string, u unsaved) {
	t.mu.Lock()
	if next := t.next; next != nil {
		t.mu.Unlock()
		next.adoptUnsaved(profile, u, t.Store)
		return
	}
	if t.unsaved == nil {
		t.unsaved = map[string]unsaved{}
	}
	if was, ok := t.unsaved[profile]; ok && was.unlock != nil && u.unlock == nil {
		u.unlock = was.unlock
	}
	t.unsaved[profile] = u
	start := !t.writing && !t.closed
	if start {
		t.writing = true
		t.stop, t.writerDone = make(chan struct{}), make(chan struct{})
	}
	stop, done := t.stop, t.writerDone
	t.mu.Unlock()
	if start {
		go t.writeUnsaved(stop, done)
	}
}

// adoptUnsaved keeps u, which from (the store of the Tokens this one
// replaces) held: its lease is carried over to this Tokens' store.
func (t *Tokens) adoptUnsaved(profile string, u unsaved, from Records) {
	if u.unlock != nil {
		ns, ok1 := t.Store.(interface{ shared() *InStore })
		os, ok2 := from.(interface{ shared() *InStore })
		if ok1 && ok2 && ns.shared() != os.shared() {
			if unlock, ok := ns.shared().adoptLease(os.shared(), profile); ok {
				u.unlock = unlock
			} else {
				// Not carried over: the writer takes the lease again.
				u.unlock()
				u.unlock = nil
			}
		}
	}
	t.keepUnsaved(profile, u)
}

// TakeOver hands was's unsaved records (and the leases held for them)
// over to t, which replaces it (a reload), and stops was's writer; was
// answers from t from now on.
func (t *Tokens) TakeOver(was *Tokens) {
	if was == nil || was == t {
		return
	}
	for p, u := range was.close(t) {
		t.adoptUnsaved(p, u, was.Store)
	}
}

// Close stops the writer of unsaved records and waits for it to end. An
// unsaved record is offered to the store once more; one it does not take
// is lost, and its lease given up (held, it would keep every agent from
// refreshing the profile for as long as this process lives).
func (t *Tokens) Close() {
	t.mu.Lock()
	var profiles []string
	for p := range t.unsaved {
		profiles = append(profiles, p)
	}
	t.mu.Unlock()
	for _, p := range profiles {
		ctx, cancel := context.WithTimeout(context.Background(), 2*retryUnsavedEvery+time.Second)
		t.flush(ctx, p)
		cancel()
	}
	for _, u := range t.close(nil) {
		if u.unlock != nil {
			u.unlock()
		}
	}
}

// close stops the writer and waits for it, and returns the unsaved
// records, which are next's from now on (nil: nobody's).
func (t *Tokens) close(next *Tokens) map[string]unsaved {
	t.mu.Lock()
	t.closed, t.next = true, next
	stop, done := t.stop, t.writerDone
	if t.writing {
		close(stop)
		t.writing = false
	}
	t.mu.Unlock()
	if done != nil {
		<-done
	}
	t.flushMu.Lock() // a refresh's write under way ends first
	defer t.flushMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.unsaved
	t.unsaved = nil
	return out
}

// successor is the Tokens that replaced t (a reload), if any.
func (t *Tokens) successor() *Tokens {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next
}

// unsavedOf is profile's unsaved record, if any.
func (t *Tokens) unsavedOf(profile string) (unsaved, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.unsaved[profile]
	return u, ok
}

// writeUnsaved offers the unsaved records to the store until none is
// left, or stop.
func (t *Tokens) writeUnsaved(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(retryUnsavedEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		t.mu.Lock()
		var profiles []string
		for p := range t.unsaved {
			profiles = append(profiles, p)
		}
		if len(profiles) == 0 {
			t.writing = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		for _, p := range profiles {
			ctx, cancel := context.WithTimeout(context.Background(), 2*retryUnsavedEvery+time.Second)
			t.flush(ctx, p)
			cancel()
		}
	}
}

// flush offers profile's unsaved record to the store, under the lease
// held for it (taken first when none is), and gives the lease up once the
// record is written or moot. An error wrapping ErrStoreUnavailable: the
// record is kept, and no refresh is to run.
func (t *Tokens) flush(ctx context.Context, profile string) error {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	u, ok := t.unsavedOf(profile)
	if !ok {
		return nil
	}
	if u.unlock == nil {
		unlock, err := t.Store.Lock(ctx, profile)
		if err != nil {
			return fmt.Errorf("%w; profile %s's refreshed record waits to be written, and no refresh runs until it is", err, profile)
		}
		u.unlock = unlock
		t.setUnlock(profile, u.rec, unlock)
	}
	err := t.saveUnsaved(profile, u)
	if err == nil || errors.Is(err, store.ErrFenced) {
		// Written or moot; or the lease was lost (it expired): taken
		// again next time.
		t.setUnlock(profile, u.rec, nil)
		u.unlock()
	}
	if errors.Is(err, store.ErrFenced) {
		err = fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
	}
	return err
}

// setUnlock records what gives up the lease held for profile's unsaved
// record rec.
func (t *Tokens) setUnlock(profile string, rec *Record, unlock func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u, ok := t.unsaved[profile]; ok && u.rec == rec {
		u.unlock = unlock
		t.unsaved[profile] = u
	}
}

// saveUnsaved writes u, profile's unsaved record, over the store's record
// when that is the one it replaced; a record that is not (signed in again
// meanwhile), or none (signed out), makes u moot: it is dropped. Any other
// error (the store down, or a record there that this agent does not read)
// keeps it: an error wrapping ErrStoreUnavailable.
func (t *Tokens) saveUnsaved(profile string, u unsaved) error {
	stored, err := t.Store.Load(profile)
	t.noteDown(err)
	switch {
	case errors.Is(err, errNoRecord):
		t.dropUnsaved(profile, u.rec)
		return nil
	case err != nil:
		return waiting(profile, err)
	case stored.RefreshToken != u.replaces:
		t.dropUnsaved(profile, u.rec)
		return nil
	}
	if err := t.Store.Save(u.rec); err != nil {
		t.noteDown(err)
		return waiting(profile, err)
	}
	t.dropUnsaved(profile, u.rec)
	t.forget(profile)
	return nil
}

// waiting is err, which kept profile's unsaved record from the store, as
// an ErrStoreUnavailable: never a sign-in while the record serves.
func waiting(profile string, err error) error {
	what := "%w: %w"
	if errors.Is(err, ErrSignIn) {
		what = "%w: %v" // the store's record is not used; ours is
	}
	if errors.Is(err, ErrStoreUnavailable) {
		return fmt.Errorf("%w; profile %s's refreshed record waits to be written, and no refresh runs until it is", err, profile)
	}
	return fmt.Errorf(what+"; profile %s's refreshed record waits to be written, and no refresh runs until it is", ErrStoreUnavailable, err, profile)
}

// dropUnsaved forgets profile's unsaved record when it is still rec.
func (t *Tokens) dropUnsaved(profile string, rec *Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u, ok := t.unsaved[profile]; ok && u.rec == rec {
		delete(t.unsaved, profile)
	}
}
