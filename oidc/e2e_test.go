package oidc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

const (
	testClient   = "crm-app"
	testSecret   = "s3cret-of-the-app"
	testRedirect = "http://127.0.0.1:8765/callback"
	testLogin    = "alice@example.com"
	testPassword = "correct horse"
)

// bed is the emulator as identity provider, with a clock the test moves.
type bed struct {
	s      *emulator.Server
	mu     sync.Mutex
	offset time.Duration
	// requests counts what reached the token endpoint, and how many of
	// them carried a Basic header or no client_secret in the body.
	tokenRequests, basic, noSecret atomic.Int64
}

func newBed(t *testing.T, edit func(*emulator.OIDCConfig)) *bed {
	t.Helper()
	// The cheapest bcrypt cost: the emulator checks the password on every
	// sign-in, and at the default cost that is 1.4 s of CPU under the race
	// detector; fifty sign-ins at once (TestFiguresSharedRefreshLoad) kept
	// two busy cores at it for more than the emulator's 60 s write timeout.
	hash, _ := bcrypt.GenerateFromPassword([]byte(testPassword), bcrypt.MinCost)
	cfg := &emulator.Config{
		OIDC: emulator.OIDCConfig{Clients: []emulator.OIDCClient{{ID: testClient, Secret: testSecret, RedirectURIs: []string{testRedirect}}},
			AccessTokenTTL: emulator.Duration(time.Hour), DeviceInterval: emulator.Duration(time.Second)},
		Users: []emulator.User{{ID: "alice", Login: testLogin, PasswordHash: string(hash)}},
	}
	if edit != nil {
		edit(&cfg.OIDC)
	}
	b := &bed{}
	b.s = emulatortest.NewWith(t, cfg, emulatortest.Options{Now: b.now}).Server
	return b
}

func (b *bed) now() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Now().Add(b.offset)
}

func (b *bed) advance(d time.Duration) {
	b.mu.Lock()
	b.offset += d
	b.mu.Unlock()
}

// RoundTrip counts token requests and how the client authenticated.
func (b *bed) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/connect/token") || strings.HasSuffix(r.URL.Path, "/connect/deviceauthorization") {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		if strings.HasSuffix(r.URL.Path, "/connect/token") {
			b.tokenRequests.Add(1)
		}
		if _, _, ok := r.BasicAuth(); ok {
			b.basic.Add(1)
		}
		if v, _ := url.ParseQuery(string(body)); v.Get("client_secret") == "" {
			b.noSecret.Add(1)
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (b *bed) config(edit func(*Config)) Config {
	cfg := Config{AuthURL: b.s.URL(), ClientID: testClient, ClientSecret: testSecret, Space: SpaceStaging,
		RedirectURI: testRedirect, HTTPClient: &http.Client{Transport: b}, Now: b.now, Timeout: 5 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

func (b *bed) client(t *testing.T, edit func(*Config)) *Client {
	t.Helper()
	c, err := New(b.config(edit))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// approve plays the user on the emulator's /device page.
func (b *bed) approve(t *testing.T, userCode, decision string) {
	t.Helper()
	if err := b.decide(userCode, decision); err != nil {
		t.Fatal(err)
	}
}

// decide is approve for a goroutine other than the test's.
func (b *bed) decide(userCode, decision string) error {
	resp, err := http.PostForm(b.s.URL()+"/device", url.Values{"user_code": {userCode}, "login": {testLogin},
		"password": {testPassword}, "decision": {decision}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("/device: HTTP %d", resp.StatusCode)
	}
	return nil
}

// signIn plays the user's browser on the sign-in page: it posts the
// authorization request's parameters with the password and the decision,
// and returns the redirect's query.
func (b *bed) signIn(t *testing.T, authURL, decision string) url.Values {
	t.Helper()
	u, err := url.Parse(authURL)
	if err != nil {
		t.Fatal(err)
	}
	f := u.Query()
	f.Set("login", testLogin)
	f.Set("password", testPassword)
	f.Set("decision", decision)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(b.s.URL()+"/connect/authorize", f)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || !strings.HasPrefix(loc.String(), testRedirect) {
		t.Fatalf("sign-in: HTTP %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return loc.Query()
}

func deviceLogin(t *testing.T, b *bed, c *Client) *Record {
	t.Helper()
	rec, err := deviceApproved(t, b, c)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// deviceApproved starts a device sign-in, approves it and polls for it.
func deviceApproved(t *testing.T, b *bed, c *Client) (*Record, error) {
	t.Helper()
	d, err := c.StartDevice(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b.approve(t, d.UserCode, "allow")
	return c.PollDevice(t.Context(), d)
}

// deviceSignIn is deviceApproved for a goroutine other than the test's:
// any failure is its error.
func deviceSignIn(ctx context.Context, b *bed, c *Client) (*Record, error) {
	d, err := c.StartDevice(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.decide(d.UserCode, "allow"); err != nil {
		return nil, err
	}
	return c.PollDevice(ctx, d)
}

func TestDeviceFlow(t *testing.T) {
	t.Parallel()
	b := newBed(t, nil)
	c := b.client(t, nil)
	d, err := c.StartDevice(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(d.UserCode) != 8 || !strings.Contains(d.VerificationURIComplete, d.UserCode) || d.Interval != time.Second {
		t.Fatalf("device: %+v", d)
	}
	start := time.Now()
	b.approve(t, d.UserCode, "allow")
	rec, err := c.PollDevice(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < time.Second {
		t.Error("the first poll did not wait for the interval")
	}
	if rec.Subject != "alice" || rec.Email != testLogin || rec.RefreshToken == "" || len(rec.AccessToken) != 64 ||
		rec.Space() != SpaceStaging || time.Until(rec.Expiry) < 59*time.Minute {
		t.Fatalf("record: %+v", rec)
	}
	// The traps: the secret on the device-authorization request, the
	// credentials in the body once per poll, never Basic, never slow_down.
	st := b.s.Stats()
	if b.noSecret.Load() != 0 || b.basic.Load() != 0 || st.Rejections["slow_down"] != 0 || b.tokenRequests.Load() != 1 {
		t.Fatalf("without secret %d, basic %d, slow_down %d, token requests %d", b.noSecret.Load(), b.basic.Load(),
			st.Rejections["slow_down"], b.tokenRequests.Load())
	}
}

func TestDevicePending(t *testing.T) {
	t.Parallel()
	// Polls while the user has not approved are authorization_pending and
	// the client keeps going, one request per interval.
	b := newBed(t, nil)
	c := b.client(t, nil)
	d, err := c.StartDevice(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(2500 * time.Millisecond)
		b.approve(t, d.UserCode, "allow")
	}()
	if _, err := c.PollDevice(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	st := b.s.Stats()
	if st.Rejections["authorization_pending"] < 1 || st.Rejections["slow_down"] != 0 || b.basic.Load() != 0 {
		t.Fatalf("rejections %v, basic %d", st.Rejections, b.basic.Load())
	}
}

func TestDeviceDenied(t *testing.T) {
	t.Parallel()
	b := newBed(t, nil)
	c := b.client(t, nil)
	d, _ := c.StartDevice(t.Context())
	b.approve(t, d.UserCode, "deny")
	_, err := c.PollDevice(t.Context(), d)
	if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "access_denied") {
		t.Fatalf("err = %v", err)
	}
}

func TestDeviceExpired(t *testing.T) {
	t.Parallel()
	b := newBed(t, func(o *emulator.OIDCConfig) { o.DeviceExpiresIn = emulator.Duration(2 * time.Second) })
	c := b.client(t, nil)
	d, _ := c.StartDevice(t.Context())
	_, err := c.PollDevice(t.Context(), d)
	var pe *ProviderError
	if !errors.Is(err, ErrExpired) || !errors.As(err, &pe) || pe.Code != "expired_token" {
		t.Fatalf("err = %v", err)
	}
}

func TestDevicePolledAfterExpiry(t *testing.T) {
	t.Parallel()
	// The provider's own expired_token: the code expired on its clock
	// while ours still has time.
	b := newBed(t, nil)
	c := b.client(t, nil)
	d, _ := c.StartDevice(t.Context())
	b.advance(10 * time.Minute)
	_, err := c.PollDevice(t.Context(), d)
	if !errors.Is(err, ErrExpired) || b.tokenRequests.Load() != 1 {
		t.Fatalf("err = %v after %d polls", err, b.tokenRequests.Load())
	}
}

func TestDeviceCancelled(t *testing.T) {
	t.Parallel()
	b := newBed(t, nil)
	c := b.client(t, nil)
	d, _ := c.StartDevice(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := c.PollDevice(ctx, d)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

func TestClientRefused(t *testing.T) {
	t.Parallel()
	b := newBed(t, nil)
	for _, tc := range []struct{ name, id, secret string }{
		{"wrong secret", testClient, "not-the-secret"},
		{"unknown client", "no-such-app", testSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := b.client(t, func(c *Config) { c.ClientID, c.ClientSecret = tc.id, tc.secret })
			_, err := c.StartDevice(t.Context())
			var pe *ProviderError
			if !errors.As(err, &pe) || pe.Code != "invalid_client" || strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func TestCodeFlow(t *testing.T) {
	t.Parallel()
	b := newBed(t, nil)
	c := b.client(t, nil)
	r, err := c.StartCode(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(r.URL)
	q := u.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("nonce") == "" || q.Get("state") == "" ||
		q.Get("redirect_uri") != testRedirect || !strings.Contains(q.Get("scope"), "offline_access Service.PublicAPI.Staging") {
		t.Fatalf("authorization URL %s", r.URL)
	}
	back := b.signIn(t, r.URL, "allow")
	rec, err := c.FinishCode(t.Context(), r, back)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Subject != "alice" || rec.Nonce != q.Get("nonce") || rec.RefreshToken == "" {
		t.Fatalf("record %+v", rec)
	}
	// The code is single-use.
	_, err = c.FinishCode(t.Context(), r, back)
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Code != "invalid_grant" {
		t.Fatalf("second use: %v", err)
	}
}

func TestCodeFlowRefusals(t *testing.T) {
	t.Parallel()
	b := newBed(t, nil)
	c := b.client(t, nil)
	t.Run("denied", func(t *testing.T) {
		r, _ := c.StartCode(t.Context())
		_, err := c.FinishCode(t.Context(), r, b.signIn(t, r.URL, "deny"))
		if !errors.Is(err, ErrDenied) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("wrong state", func(t *testing.T) {
		r, _ := c.StartCode(t.Context())
		back := b.signIn(t, r.URL, "allow")
		back.Set("state", "forged")
		_, err := c.FinishCode(t.Context(), r, back)
		if !errors.Is(err, ErrState) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("after five minutes", func(t *testing.T) {
		r, _ := c.StartCode(t.Context())
		back := b.signIn(t, r.URL, "allow")
		b.advance(5*time.Minute + time.Second)
		_, err := c.FinishCode(t.Context(), r, back)
		var pe *ProviderError
		if !errors.As(err, &pe) || pe.Code != "invalid_grant" {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("code of another sign-in", func(t *testing.T) {
		// The PKCE verifier binds the code to the request that asked for it.
		r1, _ := c.StartCode(t.Context())
		r2, _ := c.StartCode(t.Context())
		back := b.signIn(t, r1.URL, "allow")
		back.Set("state", r2.state)
		_, err := c.FinishCode(t.Context(), r2, back)
		var pe *ProviderError
		if !errors.As(err, &pe) || pe.Code != "invalid_grant" {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestRefresh(t *testing.T) {
	t.Parallel()
	for _, rotation := range []string{"reuse", "one-time"} {
		t.Run(rotation, func(t *testing.T) {
			b := newBed(t, func(o *emulator.OIDCConfig) { o.RefreshRotation = rotation })
			c := b.client(t, nil)
			rec := deviceLogin(t, b, c)
			rec.Profile = "p"
			n, err := c.Refresh(t.Context(), rec)
			if err != nil {
				t.Fatal(err)
			}
			if n.AccessToken == rec.AccessToken || n.RefreshToken == "" || n.Subject != rec.Subject {
				t.Fatalf("refreshed %+v", n)
			}
			if (rotation == "one-time") != (n.RefreshToken != rec.RefreshToken) {
				t.Fatalf("rotation %s: refresh token changed = %v", rotation, n.RefreshToken != rec.RefreshToken)
			}
			if _, err := c.Refresh(t.Context(), n); err != nil {
				t.Fatalf("with the newest refresh token: %v", err)
			}
			if rotation == "one-time" {
				_, err := c.Refresh(t.Context(), rec) // rotated away
				if !errors.Is(err, ErrSignIn) {
					t.Fatalf("rotated-away refresh token: %v", err)
				}
			}
		})
	}
}

func TestRefreshExpired(t *testing.T) {
	t.Parallel()
	b := newBed(t, nil)
	c := b.client(t, nil)
	rec := deviceLogin(t, b, c)
	b.advance(721 * time.Hour)
	_, err := c.Refresh(t.Context(), rec)
	if !errors.Is(err, ErrSignIn) || strings.Contains(err.Error(), rec.RefreshToken) {
		t.Fatalf("err = %v", err)
	}
}

func TestNoDiscovery(t *testing.T) {
	t.Parallel()
	b := newBed(t, func(o *emulator.OIDCConfig) { o.NoDiscovery = true })
	c := b.client(t, nil)
	rec := deviceLogin(t, b, c)
	if rec.Subject != "alice" || c.p.discovered {
		t.Fatalf("record %+v, discovered %v", rec, c.p.discovered)
	}
}

func TestProviderDownOrHTML(t *testing.T) {
	t.Parallel()
	// A stand-in: the emulator cannot be made to answer a web page or to
	// be absent.
	html := newHTMLServer(t)
	down := closedURL(t)
	for _, tc := range []struct{ name, url, want string }{
		{"HTML", html, "(an HTML page)"},
		{"down", down, "could not be reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{AuthURL: tc.url, ClientID: testClient, ClientSecret: testSecret, Space: SpaceProduction, Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.StartDevice(t.Context())
			var te *httpx.TransportError
			if !errors.As(err, &te) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no client id", Config{AuthURL: "https://idp.example", ClientSecret: "x", Space: SpaceStaging}, "--client-id"},
		{"no secret", Config{AuthURL: "https://idp.example", ClientID: "a", Space: SpaceStaging}, "SIGNAGENT_CLIENT_SECRET"},
		{"http to a remote host", Config{AuthURL: "http://idp.example", ClientID: "a", ClientSecret: "x", Space: SpaceStaging}, "plain http"},
		{"bad space", Config{AuthURL: "https://idp.example", ClientID: "a", ClientSecret: "x", Space: "test"}, "staging or production"},
		{"bad scope", Config{AuthURL: "https://idp.example", ClientID: "a", ClientSecret: "x", Space: SpaceStaging, ExtraScopes: []string{"a\"b"}}, "scope token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if !errors.Is(err, errdefs.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func TestScopes(t *testing.T) {
	t.Parallel()
	got, err := Config{Space: SpaceProduction, ExtraScopes: []string{"extra openid", "more"}}.Scopes()
	if err != nil || strings.Join(got, " ") != "openid profile email offline_access Service.PublicAPI extra more" {
		t.Fatalf("%v %v", got, err)
	}
}

func writeFile(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, mode)
}
