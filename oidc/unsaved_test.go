package oidc

import (
	"errors"
	"testing"
	"time"

	"github.com/signagent/signagent/store/storetest"
)

// TestRefreshedRecordTheStoreRefused: the store takes the refresh's lease
// and then refuses the write of the refreshed record (a real redis-server
// told, between the two, that it needs a replica it does not have:
// NOREPLICAS). The provider has spent the store's refresh token, so the
// agent keeps the refreshed record: it serves its access token, refuses
// to refresh from the store's spent copy while the store refuses writes
// (ErrStoreUnavailable), writes the record as soon as the store takes
// writes again, and a second agent then refreshes from it: the provider
// never sees a spent refresh token again.
func TestRefreshedRecordTheStoreRefused(t *testing.T) {
	t.Parallel()
	u := newUnsavedBed(t)
	b, c, srv, rec := u.b, u.c, u.srv, u.rec
	refuseWrites := func(on bool) {
		n := "0"
		if on {
			n = "1"
		}
		if got := storetest.Command(srv.Addr, "CONFIG", "SET", "min-replicas-to-write", n); got != "OK" {
			t.Fatalf("CONFIG SET min-replicas-to-write %s: %q", n, got)
		}
	}
	first := true
	a := &Tokens{Store: sharedRecords(t, srv.URL(), 1), Client: func(*Record) (*Client, error) {
		if first { // under the lease, before the refresh: the write will be refused
			first = false
			refuseWrites(true)
		}
		return c, nil
	}}
	got, from, err := a.TokenFrom(t.Context(), "crm")
	if err != nil || from != FromRefresh || got.RefreshToken == rec.RefreshToken {
		t.Fatalf("the refresh whose write was refused: %v, from %s, %v", got, from, err)
	}
	if stored, err := a.Store.(*InStore).Load("crm"); err != nil || stored.RefreshToken != rec.RefreshToken {
		t.Fatalf("the store took the write it was to refuse: %v %v", stored, err)
	}
	// Served from memory; a forced refresh waits for the store.
	if again, from, err := a.TokenFrom(t.Context(), "crm"); err != nil || again.AccessToken != got.AccessToken || from != FromMemory {
		t.Fatalf("the refreshed record, again: %v %s %v", again, from, err)
	}
	a.Expire("crm")
	if _, _, err := a.TokenFrom(t.Context(), "crm"); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("a refresh while the store refuses writes: %v, want ErrStoreUnavailable", err)
	}
	refuseWrites(false)
	other := &Tokens{Store: sharedRecords(t, srv.URL(), 1), Client: func(*Record) (*Client, error) { return c, nil }}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stored, err := other.Store.Load("crm")
		if err == nil && stored.RefreshToken == got.RefreshToken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refreshed record was not written once the store took writes: %v %v", stored, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	other.Expire("crm")
	if _, from, err := other.TokenFrom(t.Context(), "crm"); err != nil || from != FromRefresh {
		t.Fatalf("a second agent's refresh: %s %v", from, err)
	}
	if n := b.s.Stats().RefreshReuses; n != 0 {
		t.Fatalf("the provider saw %d spent refresh tokens again", n)
	}
}
