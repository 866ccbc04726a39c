package oidc

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// testLeaseTTL is how long the tests' leases live unrenewed (renewed
// every third of it). At 1 s, a lease was lost in CI while the race
// detector and the parallel tests held its renewing goroutine back for
// 667 ms: another agent then refreshed from a spent refresh token.
const testLeaseTTL = 3 * time.Second

// sharedRecords is an InStore on the redis-server at url, sealed with a
// key of 32 bytes key (and older keys it still opens).
func sharedRecords(t *testing.T, url string, key byte, older ...byte) *InStore {
	t.Helper()
	var old [][]byte
	for _, o := range older {
		old = append(old, bytes.Repeat([]byte{o}, 32))
	}
	s, err := store.NewSealer(bytes.Repeat([]byte{key}, 32), old...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := store.Open(url, store.Options{Sealer: s, LeaseTTL: testLeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &InStore{S: r, Name: url}
}

// TestSharedOneRefreshAcrossAgents: three agents (three Tokens, each with
// its own connection to one real redis-server) find one profile's access
// token stale at once; with one-time refresh tokens, exactly one refresh
// reaches the provider, every caller gets its token, and the provider
// sees no spent refresh token again (it would revoke the grant: the user
// signed out everywhere). With separate local stores, as before, the same
// start makes the provider revoke the grant.
func TestSharedOneRefreshAcrossAgents(t *testing.T) {
	t.Parallel()
	b := newBed(t, func(o *emulator.OIDCConfig) { o.RefreshRotation = "one-time" })
	c := b.client(t, nil)
	rec := deviceLogin(t, b, c)
	rec.Profile = "crm"
	rec.SignedInAt = time.Now().Add(-time.Hour)
	rec.Expiry = time.Now().Add(10 * time.Second) // under the 60 s margin
	srv := storetest.Start(t)
	if err := sharedRecords(t, srv.URL(), 1).Save(rec); err != nil {
		t.Fatal(err)
	}
	before := b.s.Stats()
	agents := make([]*Tokens, 3)
	for i := range agents {
		agents[i] = &Tokens{Store: sharedRecords(t, srv.URL(), 1), Client: func(*Record) (*Client, error) { return c, nil }}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	tokens := map[string]int{}
	for i := range 24 {
		wg.Go(func() {
			r, _, err := agents[i%3].Token(t.Context(), "crm")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			tokens[r.AccessToken]++
			mu.Unlock()
		})
	}
	wg.Wait()
	after := b.s.Stats()
	if n := after.Refreshes - before.Refreshes; n != 1 || len(tokens) != 1 || after.RefreshReuses != 0 {
		t.Fatalf("%d refreshes, %d distinct access tokens, %d reused refresh tokens; want 1, 1, 0", n, len(tokens), after.RefreshReuses)
	}
	// The rotated refresh token is what the store keeps.
	saved, err := agents[0].Store.Load("crm")
	if err != nil || saved.RefreshToken == rec.RefreshToken {
		t.Fatalf("stored %v %v", saved, err)
	}

	// Two local stores with the same record (two machines before this
	// store): both refresh, the second presents the spent token, and the
	// provider revokes the grant.
	for _, dir := range []string{t.TempDir() + "/a", t.TempDir() + "/b"} {
		old := *saved
		old.SignedInAt, old.RefreshedAt, old.Expiry = time.Now().Add(-time.Hour), time.Time{}, time.Now().Add(10*time.Second)
		if err := (Files{Dir: dir}).Save(&old); err != nil {
			t.Fatal(err)
		}
		(&Tokens{Store: Files{Dir: dir}, Client: func(*Record) (*Client, error) { return c, nil }}).Token(t.Context(), "crm")
	}
	if b.s.Stats().RefreshReuses != 1 {
		t.Fatalf("the emulator did not see the reuse of separate stores: %+v", b.s.Stats().RefreshReuses)
	}
}

// TestSharedFaults: a record sealed with another key, or absent, asks to
// sign in again naming the store; a store that is down serves a still
// valid access token from memory and refuses a refresh (503 in the agent)
// rather than risking a spent refresh token.
func TestSharedFaults(t *testing.T) {
	t.Parallel()
	srv := storetest.Start(t)
	rec := testRecord("crm")
	if err := sharedRecords(t, srv.URL(), 1).Save(rec); err != nil {
		t.Fatal(err)
	}
	// A rotation: the new key on the first line, the old one below; the
	// agents with the new file read the old values and write new ones.
	rotated := sharedRecords(t, srv.URL(), 2, 1)
	if r, err := rotated.Load("crm"); err != nil || r.AccessToken != rec.AccessToken {
		t.Fatalf("after a rotation: %v", err)
	}
	if err := rotated.Save(rec); err != nil {
		t.Fatal(err)
	}
	// An agent without the new key cannot open them: sign in again (or
	// give it the new file), never a broken header.
	if _, err := sharedRecords(t, srv.URL(), 1).Load("crm"); !errors.Is(err, ErrSignIn) || !strings.Contains(err.Error(), "does not open with the store key") ||
		strings.Contains(err.Error(), rec.RefreshToken) {
		t.Fatalf("a key not in the file: %v", err)
	}
	if err := sharedRecords(t, srv.URL(), 1).Save(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := sharedRecords(t, srv.URL(), 1).Load("nobody"); !errors.Is(err, ErrSignIn) || !strings.Contains(err.Error(), "signagent oidc login --store "+srv.URL()+" --profile nobody") {
		t.Fatalf("absent: %v", err)
	}
	tk := &Tokens{Store: sharedRecords(t, srv.URL(), 1), Client: func(*Record) (*Client, error) { t.Error("refresh asked for"); return nil, errors.New("no") }}
	if _, _, err := tk.Token(context.Background(), "crm"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if r, cached, err := tk.Token(context.Background(), "crm"); err != nil || !cached || r.AccessToken != rec.AccessToken {
		t.Fatalf("a valid token while the store is down: %v %v", cached, err)
	}
	tk.Expire("crm")
	if _, _, err := tk.Token(context.Background(), "crm"); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("a refresh while the store is down: %v", err)
	}
	// Readiness: the store's own check says it is down (the agent pings
	// it once); the records add nothing to say.
	if err := tk.Store.(*InStore).S.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("ping: %v", err)
	}
	if err := tk.Store.Check(); err != nil {
		t.Fatalf("check: %v", err)
	}
}

// TestSignInWithRefreshToken: a robot starts from a refresh token issued
// beforehand: one refresh checks it and the id_token names the user; with
// one-time refresh tokens the one given is spent and the new one kept. An
// unknown token asks to sign in; an empty one is bad input.
func TestSignInWithRefreshToken(t *testing.T) {
	t.Parallel()
	b := newBed(t, func(o *emulator.OIDCConfig) { o.RefreshRotation = "one-time" })
	c := b.client(t, nil)
	given := deviceLogin(t, b, c).RefreshToken
	rec, err := c.SignInWithRefreshToken(t.Context(), given)
	if err != nil || rec.Subject != "alice" || rec.RefreshToken == "" || rec.RefreshToken == given || rec.AccessToken == "" {
		t.Fatalf("%+v %v", rec, err)
	}
	if _, err := c.SignInWithRefreshToken(t.Context(), "not-a-refresh-token"); !errors.Is(err, ErrSignIn) {
		t.Fatalf("unknown: %v", err)
	}
	if _, err := c.SignInWithRefreshToken(t.Context(), " \n"); !errors.Is(err, errdefs.ErrInvalidInput) {
		t.Fatalf("empty: %v", err)
	}
}
