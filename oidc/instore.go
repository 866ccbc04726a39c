package oidc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/store"
)

// Records is where profiles' records are kept: the local files (Files) or
// a store shared by several agents (InStore).
type Records interface {
	Load(profile string) (*Record, error)
	Save(r *Record) error
	Remove(profile string) (bool, error)
	// Lock holds the profile exclusively (one refresh at a time) across
	// processes, and across agents for a shared store.
	Lock(ctx context.Context, profile string) (unlock func(), err error)
	// Check says whether the store can serve (what /readyz reports).
	Check() error
}

// ErrStoreUnavailable is a shared store that does not answer: a refresh is
// refused rather than risking a spent one-time refresh token.
var ErrStoreUnavailable = errdefs.New(errdefs.ErrStoreUnavailable, "the shared token store is unavailable")

// recordKind is the records' kind in the shared store.
const recordKind = "oidc"

// InStore keeps the records in a shared store (Redis), sealed, so that
// every agent on it serves the profiles signed in once, with one refresh
// at a time across all of them.
type InStore struct {
	S store.Records
	// Name is how messages name the store (its URL, without secrets), as
	// the user would give it to signagent oidc login --store.
	Name string

	mu     sync.Mutex
	leases map[string]store.Lease // the profiles this process holds
}

func (s *InStore) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*store.DefaultTimeout)
}

// Load reads profile's record. A record the store does not have, or
// whose value does not open with the key (tampered, or sealed with another
// key), asks to sign in again; it is never used.
func (s *InStore) Load(profile string) (*Record, error) {
	if err := CheckProfile(profile); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	b, err := s.S.Get(ctx, recordKind, profile)
	switch {
	case errors.Is(err, store.ErrFormatNewer):
		// A good record a newer agent wrote: nothing to sign in again for.
		return nil, fmt.Errorf("profile %q's record in the shared store was %w", profile, err)
	case errors.Is(err, store.ErrNotFound):
		return nil, noRecord{fmt.Errorf("%w: profile %q is not signed in to the shared store; sign in: signagent oidc login --store %s --profile %s", ErrSignIn, profile, s.Name, profile)}
	case errors.Is(err, store.ErrTooLarge), errors.Is(err, store.ErrRollback):
		// Not a key problem: the record was made huge, or an older one put
		// back, by someone who can write to Redis.
		return nil, fmt.Errorf("%w: profile %q's record in the shared store is not used (%v); sign in again: signagent oidc login --store %s --profile %s",
			ErrSignIn, profile, err, s.Name, profile)
	case errors.Is(err, store.ErrSealed):
		return nil, fmt.Errorf("%w: profile %q's record in the shared store does not open with the store key (%v); sign in again: signagent oidc login --store %s --profile %s",
			ErrSignIn, profile, err, s.Name, profile)
	case err != nil:
		return nil, unavailable(err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil || r.Version != recordVersion || r.Profile != profile {
		return nil, fmt.Errorf("%w: profile %q's record in the shared store is not a record of this version; sign in again: signagent oidc login --store %s --profile %s",
			ErrSignIn, profile, s.Name, profile)
	}
	if bad := r.tokensProblem(); bad != "" {
		return nil, fmt.Errorf("%w: profile %q's record in the shared store will not be used: %s; sign in again: signagent oidc login --store %s --profile %s",
			ErrSignIn, profile, bad, s.Name, profile)
	}
	return &r, nil
}

// Save writes r, under the profile's lease (taken for the write when this
// process does not hold it).
func (s *InStore) Save(r *Record) error {
	if err := CheckProfile(r.Profile); err != nil {
		return err
	}
	r.Version = recordVersion
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.underLease(r.Profile, func(ctx context.Context, l store.Lease) error {
		return s.S.Put(ctx, recordKind, r.Profile, b, 0, l)
	})
}

// Remove deletes profile's record; it says whether there was one.
func (s *InStore) Remove(profile string) (bool, error) {
	if err := CheckProfile(profile); err != nil {
		return false, err
	}
	var had bool
	err := s.underLease(profile, func(ctx context.Context, l store.Lease) error {
		_, err := s.S.Get(ctx, recordKind, profile)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		had = true
		return s.S.Delete(ctx, recordKind, profile, l)
	})
	return had, err
}

// underLease runs f with profile's lease: the one this process holds, or
// one taken for f alone.
func (s *InStore) underLease(profile string, f func(context.Context, store.Lease) error) error {
	ctx, cancel := s.ctx()
	defer cancel()
	s.mu.Lock()
	l := s.leases[profile]
	s.mu.Unlock()
	if l == nil {
		var err error
		if l, err = s.S.Acquire(ctx, recordKind, profile); err != nil {
			return unavailable(err)
		}
		defer l.Release()
	}
	if err := f(ctx, l); err != nil {
		if errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrFormatNewer) {
			return err // not the store's failing: a newer record is never overwritten
		}
		return unavailable(err)
	}
	return nil
}

// Lock takes profile's lease, waiting while another agent holds it.
func (s *InStore) Lock(ctx context.Context, profile string) (func(), error) {
	if err := CheckProfile(profile); err != nil {
		return nil, err
	}
	l, err := s.S.Acquire(ctx, recordKind, profile)
	if err != nil {
		return nil, unavailable(err)
	}
	return s.hold(profile, l), nil
}

// hold registers l as the profile's lease this process holds (Save and
// Remove write under it) and returns what gives it up.
func (s *InStore) hold(profile string, l store.Lease) func() {
	s.mu.Lock()
	if s.leases == nil {
		s.leases = map[string]store.Lease{}
	}
	s.leases[profile] = l
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if s.leases[profile] == l {
			delete(s.leases, profile)
		}
		s.mu.Unlock()
		l.Release()
	}
}

// shared is s: a Records that wraps a Shared has it too, for the
// hand-over of its leases (adoptLease).
func (s *InStore) shared() *InStore { return s }

// adoptLease takes over profile's lease from, another Shared on the same
// store (the one a reload replaces), holds it and returns what gives it
// up; false when from holds none or the store cannot carry it over.
func (s *InStore) adoptLease(from *InStore, profile string) (func(), bool) {
	from.mu.Lock()
	l := from.leases[profile]
	from.mu.Unlock()
	a, ok := s.S.(interface {
		Adopt(store.Lease) (store.Lease, bool)
	})
	if l == nil || !ok {
		return nil, false
	}
	n, ok := a.Adopt(l)
	if !ok {
		return nil, false
	}
	return s.hold(profile, n), true
}

// unavailable is ErrStoreUnavailable with the store's reason.
func unavailable(err error) error {
	return fmt.Errorf("%w: %s", ErrStoreUnavailable, strings.TrimPrefix(err.Error(), store.ErrUnavailable.Error()+": "))
}

// Check says nothing more than the shared store would: the records need
// nothing beyond it, and its readiness is checked on its own (the agent's
// "store" check, which pings it once).
func (s *InStore) Check() error { return nil }
