package oidc

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestIDTokenRefused(t *testing.T) {
	t.Parallel()
	f := newFakeIDP(t)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	good := func(nonce string) map[string]any {
		return map[string]any{"iss": f.url, "sub": "alice", "aud": testClient, "exp": time.Now().Add(time.Hour).Unix(),
			"iat": time.Now().Unix(), "nonce": nonce}
	}
	for _, tc := range []struct {
		name   string
		edit   func(m map[string]any)
		signer *rsa.PrivateKey
		want   string
	}{
		{"good", nil, nil, ""},
		{"wrong nonce", func(m map[string]any) { m["nonce"] = "another" }, nil, "nonce"},
		{"no nonce", func(m map[string]any) { delete(m, "nonce") }, nil, "nonce"},
		{"wrong audience", func(m map[string]any) { m["aud"] = "another-app" }, nil, "audience"},
		{"expired", func(m map[string]any) { m["exp"] = time.Now().Add(-time.Hour).Unix() }, nil, "expired"},
		{"another issuer", func(m map[string]any) { m["iss"] = "https://evil.example" }, nil, "different provider"},
		{"signed by another key", nil, other, "signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent string
			f.claims = func(string) map[string]any {
				m := good(sent)
				if tc.edit != nil {
					tc.edit(m)
				}
				return m
			}
			f.signer = tc.signer
			c, err := New(Config{AuthURL: f.url, ClientID: testClient, ClientSecret: testSecret, Space: SpaceStaging, RedirectURI: testRedirect})
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.StartCode(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			sent = r.nonce
			rec, err := c.FinishCode(t.Context(), r, url.Values{"code": {"c"}, "state": {r.state}})
			if tc.want == "" {
				if err != nil || rec.Subject != "alice" {
					t.Fatalf("%v %+v", err, rec)
				}
				return
			}
			if !errors.Is(err, ErrIDToken) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func TestRefreshNonce(t *testing.T) {
	t.Parallel()
	// After a refresh the id_token's nonce may be absent or the original
	// one; anything else, or another subject, is refused.
	f := newFakeIDP(t)
	for _, tc := range []struct {
		name, nonce, sub string
		ok               bool
	}{
		{"absent", "", "alice", true},
		{"equal", "n1", "alice", true},
		{"different", "n2", "alice", false},
		{"another user", "", "mallory", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.claims = func(string) map[string]any {
				m := map[string]any{"iss": f.url, "sub": tc.sub, "aud": testClient, "exp": time.Now().Add(time.Hour).Unix()}
				if tc.nonce != "" {
					m["nonce"] = tc.nonce
				}
				return m
			}
			c, _ := New(Config{AuthURL: f.url, ClientID: testClient, ClientSecret: testSecret, Space: SpaceStaging})
			_, err := c.Refresh(t.Context(), &Record{Profile: "p", Subject: "alice", Nonce: "n1", RefreshToken: "rt"})
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrIDToken)) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// TestEndlessKeySet: a provider whose key set never ends is read up to
// MaxAnswer (go-oidc reads the key set whole by itself; the client's
// transport cuts every answer) and the sign-in fails in one line. The
// stand-in counts what it managed to send: the limit plus what the
// sockets buffer, far below the 64 MiB it offers.
func TestEndlessKeySet(t *testing.T) {
	t.Parallel()
	f := newFakeIDP(t)
	f.endlessJWKS = true
	var sent string
	f.claims = func(string) map[string]any {
		return map[string]any{"iss": f.url, "sub": "alice", "aud": testClient, "exp": time.Now().Add(time.Hour).Unix(),
			"iat": time.Now().Unix(), "nonce": sent}
	}
	c, err := New(Config{AuthURL: f.url, ClientID: testClient, ClientSecret: testSecret, Space: SpaceStaging, RedirectURI: testRedirect})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.StartCode(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sent = r.nonce
	_, err = c.FinishCode(t.Context(), r, url.Values{"code": {"c"}, "state": {r.state}})
	if !errors.Is(err, ErrIDToken) || !strings.Contains(err.Error(), "larger than") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v", err)
	}
	if n := f.jwksBytes.Load(); n > 16<<20 {
		t.Fatalf("the client took %d MiB of the endless key set", n>>20)
	}
	t.Logf("the stand-in sent %d KiB of the key set before the client stopped", f.jwksBytes.Load()>>10)
}
