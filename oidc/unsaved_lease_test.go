package oidc

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// refusingSaves is a shared store whose Save fails while refuse is set:
// a connection that drops on the refreshed record's write alone, the
// lease's taking and release going through. A real redis-server cannot be
// made to fail that one write and then take the release (NOREPLICAS
// refuses both), so the failure is injected here; everything else is the
// real store.
type refusingSaves struct {
	*InStore
	refuse atomic.Bool
}

func (r *refusingSaves) Save(rec *Record) error {
	if r.refuse.Load() {
		return unavailable(errors.New("connection reset (injected by the test)"))
	}
	return r.InStore.Save(rec)
}

// unsavedBed is a profile due for a refresh in a real redis-server, with
// one-time refresh tokens at the emulator's provider.
type unsavedBed struct {
	b   *bed
	c   *Client
	srv *storetest.Server
	rec *Record
}

func newUnsavedBed(t *testing.T) *unsavedBed {
	b := newBed(t, func(o *emulator.OIDCConfig) { o.RefreshRotation = "one-time" })
	c := b.client(t, nil)
	rec := deviceLogin(t, b, c)
	rec.Profile = "crm"
	rec.SignedInAt = time.Now().Add(-time.Hour)
	rec.Expiry = time.Now().Add(10 * time.Second) // under the 60 s margin: due
	srv := storetest.Start(t)
	if err := sharedRecords(t, srv.URL(), 1).Save(rec); err != nil {
		t.Fatal(err)
	}
	return &unsavedBed{b: b, c: c, srv: srv, rec: rec}
}

// clientFor is the bed's client, for Tokens.Client.
func (u *unsavedBed) clientFor(*Record) (*Client, error) { return u.c, nil }

// refusingAgent is an agent whose store refuses its writes until told
// (rs.refuse), after a refresh whose write was refused: its record, got,
// is unsaved in a.
func (u *unsavedBed) refusingAgent(t *testing.T) (rs *refusingSaves, a *Tokens, got *Record) {
	t.Helper()
	rs = &refusingSaves{InStore: sharedRecords(t, u.srv.URL(), 1)}
	rs.refuse.Store(true)
	a = &Tokens{Store: rs, Client: u.clientFor}
	return rs, a, u.refreshUnsaved(t, a)
}

// refreshUnsaved has a refresh whose write the store refuses: its record
// is unsaved in a.
func (u *unsavedBed) refreshUnsaved(t *testing.T, a *Tokens) *Record {
	t.Helper()
	got, from, err := a.TokenFrom(t.Context(), "crm")
	if err != nil || from != FromRefresh || got.RefreshToken == u.rec.RefreshToken {
		t.Fatalf("the refresh whose write was refused: %v, from %s, %v", got, from, err)
	}
	if _, ok := a.unsavedOf("crm"); !ok {
		t.Fatal("the refreshed record is not kept as unsaved")
	}
	return got
}

// waitStored waits until the store holds refresh token rt for crm.
func waitStored(t *testing.T, r Records, rt string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		stored, err := r.Load("crm")
		if err == nil && stored.RefreshToken == rt {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refreshed record was not written: %v %v", stored, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUnsavedRecordKeepsItsLease: a refresh's write fails after the
// provider answered (its refresh token is spent). The agent keeps the
// refresh's lease, renewed, while the record is unsaved: a second agent
// due for a refresh waits for it and does not refresh from the store's
// spent copy (its refresh gives up: ErrStoreUnavailable). Once the store
// takes the write, under that same lease, the second agent uses the
// written record. The provider never sees a spent refresh token again.
func TestUnsavedRecordKeepsItsLease(t *testing.T) {
	t.Parallel()
	u := newUnsavedBed(t)
	rs, a, got := u.refusingAgent(t)
	defer a.Close()

	// A second longer than the lease lives unrenewed: were it not
	// renewed, the second agent would take it.
	other := &Tokens{Store: sharedRecords(t, u.srv.URL(), 1), Timeout: testLeaseTTL + time.Second, Client: u.clientFor}
	other.Expire("crm")
	if _, from, err := other.TokenFrom(t.Context(), "crm"); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("a second agent's refresh while the first holds the unsaved record: %s %v, want ErrStoreUnavailable", from, err)
	}
	if n := u.b.s.Stats().RefreshReuses; n != 0 {
		t.Fatalf("the provider saw %d spent refresh tokens again", n)
	}
	rs.refuse.Store(false)
	waitStored(t, other.Store, got.RefreshToken)
	again, _, err := other.TokenFrom(t.Context(), "crm")
	if err != nil || again.AccessToken != got.AccessToken {
		t.Fatalf("the second agent, once the record is written: %v %v", again, err)
	}
	if n := u.b.s.Stats().RefreshReuses; n != 0 {
		t.Fatalf("the provider saw %d spent refresh tokens again", n)
	}
}

// TestUnsavedRecordAcrossAReload: a reload builds a new Tokens on a new
// connection to the store, and closes the old connection, while a
// refreshed record is unsaved. The record (and its lease) is handed over:
// the new Tokens serves it, writes it once the store takes it, and
// refreshes from it, never from the store's spent copy; the old Tokens'
// writer has ended, and the old Tokens answers from the new one.
func TestUnsavedRecordAcrossAReload(t *testing.T) {
	t.Parallel()
	u := newUnsavedBed(t)
	rs, a, got := u.refusingAgent(t)

	nextStore := sharedRecords(t, u.srv.URL(), 1)
	b := &Tokens{Store: nextStore, Client: u.clientFor}
	defer b.Close()
	b.TakeOver(a)
	rs.S.(*store.Shared).Close() // the reload closes the old store
	nextStore.mu.Lock()
	adopted := nextStore.leases["crm"] != nil
	nextStore.mu.Unlock()
	if !adopted {
		t.Fatal("the unsaved record's lease was not carried over to the new store")
	}
	if rec, from, err := b.TokenFrom(t.Context(), "crm"); err != nil || rec.AccessToken != got.AccessToken || from != FromMemory {
		t.Fatalf("the new Tokens, while the record is unsaved: %v %s %v", rec, from, err)
	}
	if rec, _, err := a.TokenFrom(t.Context(), "crm"); err != nil || rec.AccessToken != got.AccessToken {
		t.Fatalf("the old Tokens after the reload: %v %v", rec, err)
	}
	waitStored(t, nextStore, got.RefreshToken)
	b.Expire("crm")
	if rec, from, err := b.TokenFrom(t.Context(), "crm"); err != nil || from != FromRefresh || rec.RefreshToken == got.RefreshToken {
		t.Fatalf("the new Tokens' refresh: %v %s %v", rec, from, err)
	}
	if n := u.b.s.Stats().RefreshReuses; n != 0 {
		t.Fatalf("the provider saw %d spent refresh tokens again", n)
	}
	a.mu.Lock()
	writing, done := a.writing, a.writerDone
	a.mu.Unlock()
	select {
	case <-done:
	default:
		t.Fatal("the old Tokens' writer still runs after the reload")
	}
	if writing {
		t.Fatal("the old Tokens says its writer runs")
	}
}

// TestUnsavedRecordOverARecordNotRead: while a refreshed record is
// unsaved, the store's record is one this agent does not use (tampered:
// it does not open). The unsaved record holds the only live refresh
// token: it is kept and served, and a refresh is refused as waiting for
// the store, never as a sign-in.
func TestUnsavedRecordOverARecordNotRead(t *testing.T) {
	t.Parallel()
	u := newUnsavedBed(t)
	rs, a, got := u.refusingAgent(t)
	defer a.Close()
	data := u.srv.Command("KEYS", "signagent:{oidc:*}")
	if !strings.HasPrefix(data, "signagent:{oidc:") || u.srv.Command("HSET", data, "v", "a value sealed with no key of ours") == "" {
		t.Fatalf("no record to tamper with: %q", data)
	}
	if _, err := rs.Load("crm"); !errors.Is(err, ErrSignIn) {
		t.Fatalf("the tampered record loads: %v", err)
	}
	rs.refuse.Store(false)
	a.Expire("crm")
	_, _, err := a.TokenFrom(t.Context(), "crm")
	if !errors.Is(err, ErrStoreUnavailable) || errors.Is(err, ErrSignIn) {
		t.Fatalf("a refresh over a record not read: %v, want ErrStoreUnavailable and no sign-in", err)
	}
	if kept, ok := a.unsavedOf("crm"); !ok || kept.rec.RefreshToken != got.RefreshToken {
		t.Fatal("the unsaved record, the only live refresh token, was dropped")
	}
	if n := u.b.s.Stats().RefreshReuses; n != 0 {
		t.Fatalf("the provider saw %d spent refresh tokens again", n)
	}
}

// TestStoreDownAskedOnce: a profile inside its refresh margin, its token
// still usable, while the store is down: the first call finds the store
// down, and the next, within storeDownFor, answer from memory without
// asking it (counted by the store's own observer): no two store timeouts
// per call.
func TestStoreDownAskedOnce(t *testing.T) {
	t.Parallel()
	u := newUnsavedBed(t)
	rec := *u.rec
	rec.Expiry = time.Now().Add(90 * time.Second) // fresh now
	rs := sharedRecords(t, u.srv.URL(), 1)
	if err := rs.Save(&rec); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var failed []string
	rs.S.Observe(func(op, result string) {
		if result == "unavailable" {
			mu.Lock()
			failed = append(failed, op)
			mu.Unlock()
		}
	})
	var skew atomic.Int64
	a := &Tokens{Store: rs, Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) },
		Client: u.clientFor}
	if _, from, err := a.TokenFrom(t.Context(), "crm"); err != nil || from != FromStore {
		t.Fatalf("the first read: %s %v", from, err)
	}
	u.srv.Stop()
	skew.Store(int64(45 * time.Second)) // 45 s left: due (60 s), usable (30 s)
	for i := range 3 {
		got, from, err := a.TokenFrom(t.Context(), "crm")
		if err != nil || from != FromMemory || got.AccessToken != rec.AccessToken {
			t.Fatalf("call %d while the store is down: %s %v", i, from, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != 1 {
		t.Fatalf("the store was asked %d times while down (%v), want once", len(failed), failed)
	}
	skew.Store(int64(75 * time.Second)) // 15 s left: not to be served
	if _, _, err := a.TokenFrom(t.Context(), "crm"); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("a token past what may be served: %v, want ErrStoreUnavailable", err)
	}
}

// TestClosedTokensGiveUpTheLease: Tokens closed (the scheme turned off by
// a reload) while a refreshed record is unsaved and the store still
// refuses it: the record is lost, and the lease held for it is given up,
// not renewed for as long as the process lives (every agent would wait on
// it for every refresh of the profile).
func TestClosedTokensGiveUpTheLease(t *testing.T) {
	t.Parallel()
	u := newUnsavedBed(t)
	_, a, _ := u.refusingAgent(t)
	a.Close()
	// Less than a lease's life: a lease left to expire, unrenewed but
	// not given up, is not taken in time either.
	ctx, cancel := context.WithTimeout(t.Context(), testLeaseTTL-time.Second)
	defer cancel()
	unlock, err := sharedRecords(t, u.srv.URL(), 1).Lock(ctx, "crm")
	if err != nil {
		t.Fatalf("the lease after Close: %v", err)
	}
	unlock()
	if _, ok := a.unsavedOf("crm"); ok {
		t.Fatal("a closed Tokens keeps an unsaved record")
	}
}
