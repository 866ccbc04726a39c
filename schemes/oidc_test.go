package schemes

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// refusingSaves is a shared store whose Save fails while refuse is set:
// a connection that drops on the refreshed record's write alone (a real
// redis-server cannot fail that one write and take the lease's release);
// everything else is the real store.
type refusingSaves struct {
	*oidc.InStore
	refuse atomic.Bool
}

func (r *refusingSaves) Save(rec *oidc.Record) error {
	if r.refuse.Load() {
		return errors.Join(oidc.ErrStoreUnavailable, errors.New("connection reset (injected by the test)"))
	}
	return r.InStore.Save(rec)
}

func openShared(t *testing.T, url string) *oidc.InStore {
	t.Helper()
	sealer, err := store.NewSealer(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	// Renewed every second: a lease of 1 s can be lost while the race
	// detector and the parallel tests hold its renewal back.
	s, err := store.Open(url, store.Options{Sealer: sealer, LeaseTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &oidc.InStore{S: s, Name: url}
}

// TestOIDCReloadKeepsTheUnsavedRecord: an agent refreshed a profile and
// the store did not take the write (the provider spent the store's
// refresh token); a reload then builds the OpenID Connect scheme again,
// with new Tokens on a new connection to the store, and the old
// connection is closed. The new Tokens serves the refreshed record, and
// it is written to the store; the provider (the emulator, one-time
// refresh tokens) never sees the spent refresh token again.
func TestOIDCReloadKeepsTheUnsavedRecord(t *testing.T) {
	t.Parallel()
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	em := emulatortest.NewWith(t, &emulator.Config{
		OIDC: emulator.OIDCConfig{Clients: []emulator.OIDCClient{{ID: "crm-app", Secret: "s3cret-of-the-app"}},
			AccessTokenTTL: emulator.Duration(time.Hour), DeviceInterval: emulator.Duration(time.Second), RefreshRotation: "one-time"},
		Users: []emulator.User{{ID: "alice", Login: "alice@example.com", PasswordHash: string(hash)}},
	}, emulatortest.Options{}).Server
	c, err := oidc.New(oidc.Config{AuthURL: em.URL(), ClientID: "crm-app", ClientSecret: "s3cret-of-the-app", Space: oidc.SpaceStaging, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.StartDevice(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.PostForm(em.URL()+"/device", url.Values{"user_code": {d.UserCode}, "login": {"alice@example.com"}, "password": {"pw"}, "decision": {"allow"}})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/device: %v %v", resp, err)
	}
	resp.Body.Close()
	rec, err := c.PollDevice(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	rec.Profile = "crm"
	rec.SignedInAt = time.Now().Add(-time.Hour)
	rec.Expiry = time.Now().Add(10 * time.Second) // under the 60 s margin: due
	srv := storetest.Start(t)
	if err := openShared(t, srv.URL()).Save(rec); err != nil {
		t.Fatal(err)
	}
	client := func(*oidc.Record) (*oidc.Client, error) { return c, nil }

	was := &refusingSaves{InStore: openShared(t, srv.URL())}
	was.refuse.Store(true)
	first, err := Build(nil, Settings{OIDC: &OIDCSettings{Records: was, Client: client}}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	sel := authz.Selector{Scheme: authz.SchemeOIDC, Profile: "crm"}
	au, err := first.Authorizer(sel)
	if err != nil {
		t.Fatal(err)
	}
	h, err := au.Header(t.Context())
	if err != nil || h.Source != oidc.FromRefresh {
		t.Fatalf("the refresh whose write was refused: %+v %v", h, err)
	}

	next := openShared(t, srv.URL())
	second, err := Build(nil, Settings{OIDC: &OIDCSettings{Records: next, Client: client}}, Deps{Was: first})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range second {
		if o, ok := s.(oidcScheme); ok {
			defer o.Tokens.Close()
		}
	}
	was.S.(*store.Shared).Close() // the reload closes the old store
	if au, err = second.Authorizer(sel); err != nil {
		t.Fatal(err)
	}
	if again, err := au.Header(t.Context()); err != nil || again.Value != h.Value {
		t.Fatalf("after the reload: %+v %v, want the refreshed record's token", again, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stored, err := next.Load("crm")
		if err == nil && "Bearer "+stored.AccessToken == h.Value {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refreshed record was not written after the reload: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := em.Stats().RefreshReuses; n != 0 {
		t.Fatalf("the provider saw %d spent refresh tokens again", n)
	}
}
