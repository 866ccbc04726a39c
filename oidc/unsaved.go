package oidc

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A refreshed record the store did not take (it went down, or stopped
// taking writes, between the lease and the write) holds the only live
// refresh token of its grant: the provider has spent the one the store
// still holds, and a provider that sees a spent one again revokes the
// whole grant (RFC 9700 4.14.2), signing the user out everywhere. Such a
// record is kept here, served from memory, never refreshed from the
// store's copy, and written to the store as soon as it takes it (under
// the profile's lease, and only over the record it replaced).

// unsaved is a refreshed record not yet in the store, and the refresh
// token of the record it replaces there.
type unsaved struct {
	rec      *Record
	replaces string
}

// retryUnsavedEvery is how often an unsaved record is offered to the
// store again: the other agents refresh with the store's spent copy only
// once it answers and their own access tokens need it, later than this.
const retryUnsavedEvery = 250 * time.Millisecond

// keepUnsaved keeps rec, which replaced the store's record holding the
// refresh token replaces, until the store takes it; the first record kept
// for a profile starts the writer.
func (t *Tokens) keepUnsaved(rec *Record, replaces string) {
	t.mu.Lock()
	if t.unsaved == nil {
		t.unsaved = map[string]unsaved{}
	}
	_, writing := t.unsaved[rec.Profile]
	t.unsaved[rec.Profile] = unsaved{rec: rec, replaces: replaces}
	t.mu.Unlock()
	if !writing {
		go t.writeUnsaved(rec.Profile)
	}
}

// unsavedOf is profile's unsaved record, if any.
func (t *Tokens) unsavedOf(profile string) (unsaved, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.unsaved[profile]
	return u, ok
}

// writeUnsaved offers profile's unsaved record to the store until it is
// written or no longer wanted.
func (t *Tokens) writeUnsaved(profile string) {
	for {
		time.Sleep(retryUnsavedEvery)
		if _, ok := t.unsavedOf(profile); !ok {
			return
		}
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*retryUnsavedEvery+time.Second)
			defer cancel()
			unlock, err := t.Store.Lock(ctx, profile)
			if err != nil {
				return
			}
			defer unlock()
			t.saveUnsaved(profile, nil)
		}()
	}
}

// saveUnsaved writes profile's unsaved record over stored, the store's
// record read under the profile's lease (nil: read here), when stored
// is the record it replaced; a record that is not (signed in again, or
// out, meanwhile) makes the unsaved one moot: it is dropped. It returns
// the record to use now, nil when there was no unsaved record; an error
// when the store did not take it (it is kept, and no refresh is to run).
func (t *Tokens) saveUnsaved(profile string, stored *Record) (*Record, error) {
	u, ok := t.unsavedOf(profile)
	if !ok {
		return nil, nil
	}
	if stored == nil {
		var err error
		stored, err = t.Store.Load(profile)
		if errors.Is(err, ErrStoreUnavailable) {
			return nil, err
		}
		if err != nil {
			stored = nil // gone: signed out meanwhile
		}
	}
	if stored == nil || stored.RefreshToken != u.replaces {
		t.dropUnsaved(profile, u.rec)
		return stored, nil
	}
	if err := t.Store.Save(u.rec); err != nil {
		if !errors.Is(err, ErrStoreUnavailable) {
			err = fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
		}
		return nil, fmt.Errorf("%w; profile %s's refreshed record waits to be written, and no refresh runs until it is", err, profile)
	}
	t.dropUnsaved(profile, u.rec)
	return u.rec, nil
}

// dropUnsaved forgets profile's unsaved record when it is still rec.
func (t *Tokens) dropUnsaved(profile string, rec *Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u, ok := t.unsaved[profile]; ok && u.rec == rec {
		delete(t.unsaved, profile)
	}
}
