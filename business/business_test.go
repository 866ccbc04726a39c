package business

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"golang.org/x/crypto/bcrypt"
)

const (
	devKey   = "testClient-0a1b2c3d4e"
	myBox    = "3f2a0c1e-5b7d-4e8f-9a01-23456789abcd"
	otherBox = "7d1e2f30-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
	password = "correct horse"
	redirect = "http://127.0.0.1:8765/callback"
)

type bed struct {
	emu    *emulator.Server
	mu     sync.Mutex
	offset time.Duration
}

func (b *bed) now() time.Time { b.mu.Lock(); defer b.mu.Unlock(); return time.Now().Add(b.offset) }
func (b *bed) advance(d time.Duration) {
	b.mu.Lock()
	b.offset += d
	b.mu.Unlock()
}

func newBed(t *testing.T) *bed {
	t.Helper()
	// The cheapest bcrypt cost: the emulator checks the password at every
	// sign-in, and at the default cost that took seconds of CPU under -race.
	hashBytes, _ := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	hash := string(hashBytes)
	cfg := &emulator.Config{
		Developers: []emulator.Developer{{Name: "crm", Key: devKey}},
		TokenTTL:   emulator.Duration(time.Hour),
		OIDC: emulator.OIDCConfig{Clients: []emulator.OIDCClient{{ID: "crm-app", Secret: "s3cret", RedirectURIs: []string{redirect}}},
			AccessTokenTTL: emulator.Duration(time.Hour)},
		Organizations: []emulator.Organization{{ID: "org-1", FullName: "Horns and Hooves LLC", Boxes: []emulator.Box{{GUID: myBox}}},
			{ID: "org-2", FullName: "Someone Else JSC", Boxes: []emulator.Box{{GUID: otherBox}}}},
		Users: []emulator.User{{ID: "alice", Login: "alice@example.com", PasswordHash: hash, Boxes: []string{myBox}}},
	}
	b := &bed{}
	b.emu = emulatortest.NewWith(t, cfg, emulatortest.Options{Now: b.now}).Server
	return b
}

func (b *bed) legacyAuth(t *testing.T) authz.Authorizer {
	t.Helper()
	lc, err := legacy.New(legacy.Config{APIURL: b.emu.URL(), DeveloperKey: devKey, Settings: httpx.Settings{Now: b.now}})
	if err != nil {
		t.Fatal(err)
	}
	return legacy.NewTokens(lc, 0, 0).For(legacy.Identity{By: legacy.ByPassword, Subject: "alice@example.com", Password: password})
}

// oidcAuth signs alice in with the code flow (the browser played by
// posting the sign-in form) and returns the profile's authorizer.
func (b *bed) oidcAuth(t *testing.T) authz.Authorizer {
	t.Helper()
	c, err := oidc.New(oidc.Config{AuthURL: b.emu.URL(), ClientID: "crm-app", ClientSecret: "s3cret", Space: oidc.SpaceStaging, RedirectURI: redirect})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.StartCode(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(r.URL)
	f := u.Query()
	f.Set("login", "alice@example.com")
	f.Set("password", password)
	f.Set("decision", "allow")
	nr := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := nr.PostForm(b.emu.URL()+"/connect/authorize", f)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	rec, err := c.FinishCode(t.Context(), r, loc.Query())
	if err != nil {
		t.Fatal(err)
	}
	rec.Profile = "p"
	s := oidc.Files{Dir: t.TempDir() + "/s"}
	if err := s.Save(rec); err != nil {
		t.Fatal(err)
	}
	return (&oidc.Tokens{Store: s, Client: func(*oidc.Record) (*oidc.Client, error) { return c, nil }}).For("p")
}

func TestBusinessCalls(t *testing.T) {
	b := newBed(t)
	for name, a := range map[string]authz.Authorizer{"legacy": b.legacyAuth(t), "oidc": b.oidcAuth(t)} {
		t.Run(name, func(t *testing.T) {
			c, err := New(Config{APIURL: b.emu.URL()}, a)
			if err != nil {
				t.Fatal(err)
			}
			orgs, err := c.GetMyOrganizations(t.Context())
			if err != nil || len(orgs) != 1 || orgs[0].FullName != "Horns and Hooves LLC" || orgs[0].Boxes[0].BoxIDGUID != myBox {
				t.Fatalf("%+v %v", orgs, err)
			}
			emp, err := c.GetMyEmployee(t.Context(), strings.ReplaceAll(myBox, "-", "")+"@box.example")
			if err != nil || emp.User.UserID != "alice" {
				t.Fatalf("%+v %v", emp, err)
			}
			_, err = c.GetMyEmployee(t.Context(), otherBox)
			var se *Error
			if !errors.As(err, &se) || se.Status != 403 || !strings.Contains(err.Error(), "Access to Box ["+otherBox+"] is denied") ||
				!strings.Contains(err.Error(), "box "+otherBox+" is not among this user's boxes") {
				t.Fatalf("another's box: %v", err)
			}
			_, err = c.GetMyEmployee(t.Context(), "00000000-0000-0000-0000-000000000001")
			if !errors.As(err, &se) || se.Status != 404 {
				t.Fatalf("unknown box: %v", err)
			}
			r, err := c.Do(t.Context(), http.MethodGet, "GetMyEmployee", nil, nil, "")
			if err != nil || r.Status != 400 || !strings.Contains(string(r.Body), "Could not get boxId") {
				t.Fatalf("raw without boxId: %+v %v", r, err)
			}
		})
	}
}

// TestExpiredBetweenCalls: a token that expires between two calls is
// refused once, obtained again and the call succeeds, transparently.
func TestExpiredBetweenCalls(t *testing.T) {
	b := newBed(t)
	c, _ := New(Config{APIURL: b.emu.URL()}, b.legacyAuth(t))
	if _, err := c.GetMyOrganizations(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The emulator's tokens live an hour; the client's cache thinks 24h.
	b.advance(2 * time.Hour)
	if _, err := c.GetMyOrganizations(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := b.emu.Stats(); st.LegacyTokens != 2 || st.Rejections[emulator.CodeInvalidAuthToken] != 1 {
		t.Fatalf("tokens %d, rejections %v", st.LegacyTokens, st.Rejections)
	}
}

type deadAuth struct{}

func (deadAuth) Header(context.Context) (authz.Header, error) {
	return authz.Header{Value: "Bearer " + strings.Repeat("0", 64)}, nil
}
func (deadAuth) Reject(string)        {}
func (deadAuth) Forget(time.Duration) {}
func (deadAuth) Identity() string     { return "dead" }
func (deadAuth) String() string       { return "a dead token" }

func TestRefusedTwice(t *testing.T) {
	b := newBed(t)
	c, _ := New(Config{APIURL: b.emu.URL()}, deadAuth{})
	_, err := c.GetMyOrganizations(t.Context())
	var re *authz.RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "a dead token") {
		t.Fatalf("err = %v", err)
	}
}

func TestPaths(t *testing.T) {
	for _, ok := range []string{"GetMyOrganizations", "/GetMyEmployee", "V3/Something"} {
		if _, err := Path(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/", "../etc/passwd", "/a/../b", "//evil.example/x", "http://evil.example/", "/a//b", "/a?b=c", "/%2e%2e/x", "/a\\b", "/a\nb"} {
		if _, err := Path(bad); !errors.Is(err, errdefs.ErrInvalidInput) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestServiceDownOrHTML(t *testing.T) {
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<!doctype html><p>maintenance</p>"))
	}))
	defer html.Close()
	c, _ := New(Config{APIURL: html.URL}, deadAuth{})
	_, err := c.GetMyOrganizations(t.Context())
	var te *httpx.TransportError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "an HTML page") {
		t.Fatalf("HTML: %v", err)
	}
	html.Close()
	_, err = c.GetMyOrganizations(t.Context())
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "could not reach") {
		t.Fatalf("down: %v", err)
	}
}

// TestGetMyOrganizationsDoesNotRegister: the typed method reads
// (autoRegister=false: the emulator counts no registration however often
// it is called); AutoRegister asks for the side effect; a raw call without
// the parameter registers (the service's default), and the fourth
// registering call of a day is refused 409.
func TestGetMyOrganizationsDoesNotRegister(t *testing.T) {
	b := newBed(t)
	c, err := New(Config{APIURL: b.emu.URL()}, b.legacyAuth(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := c.GetMyOrganizations(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.emu.Stats().Registrations; n != 0 {
		t.Fatalf("the typed method registered %d times", n)
	}
	if _, err := c.GetMyOrganizations(t.Context(), AutoRegister()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		r, err := c.Do(t.Context(), http.MethodGet, "GetMyOrganizations", nil, nil, "")
		if err != nil || r.Status != 200 {
			t.Fatalf("raw call %d: %+v %v", i, r, err)
		}
	}
	if n := b.emu.Stats().Registrations; n != 3 {
		t.Fatalf("%d registrations, want 3", n)
	}
	r, err := c.Do(t.Context(), http.MethodGet, "GetMyOrganizations", nil, nil, "")
	if err != nil || r.Status != http.StatusConflict {
		t.Fatalf("fourth registering call: %+v %v", r, err)
	}
	// Reading is still allowed, and the next day registers again.
	if _, err := c.GetMyOrganizations(t.Context()); err != nil {
		t.Fatalf("a read after the limit: %v", err)
	}
	b.advance(24 * time.Hour)
	if _, err := c.GetMyOrganizations(t.Context(), AutoRegister()); err != nil {
		t.Fatalf("the next day: %v", err)
	}
	r, err = c.Do(t.Context(), http.MethodGet, "GetMyOrganizations", url.Values{"autoRegister": {"maybe"}}, nil, "")
	if err != nil || r.Status != http.StatusBadRequest {
		t.Fatalf("autoRegister=maybe: %+v %v", r, err)
	}
}
