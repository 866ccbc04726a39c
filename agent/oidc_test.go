package agent_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/oidc"
)

const (
	oidcClientID = "crm-app"
	oidcSecret   = "s3cret-of-the-app"
)

func (h *harness) oidcClient(t testing.TB) *oidc.Client {
	c, err := oidc.New(oidc.Config{AuthURL: h.emu.URL(), ClientID: oidcClientID, ClientSecret: oidcSecret, Space: oidc.SpaceStaging})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// signInOIDC signs alice in with the code flow, her login and consent
// posted to the emulator's sign-in form as a browser would, and keeps the
// tokens as profile "default". (The device flow waits its poll interval,
// a second; the code flow does not: one second off each of the package's
// many OIDC tests. oidc's and cmd/signagent's tests drive both flows.)
func (h *harness) signInOIDC(t testing.TB) oidc.Files {
	t.Helper()
	ctx := context.Background()
	c, err := oidc.New(oidc.Config{AuthURL: h.emu.URL(), ClientID: oidcClientID, ClientSecret: oidcSecret, Space: oidc.SpaceStaging,
		RedirectURI: oidcRedirect})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.StartCode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	form := u.Query()
	form.Set("login", "alice@example.com")
	form.Set("password", alicePassword)
	form.Set("decision", "allow")
	u.RawQuery = ""
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.PostForm(u.String(), form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("the sign-in form answered %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	rec, err := c.FinishCode(ctx, r, back.Query())
	if err != nil {
		t.Fatal(err)
	}
	rec.Profile = "default"
	s := oidc.Files{Dir: t.TempDir() + "/signagent"}
	if err := s.Save(rec); err != nil {
		t.Fatal(err)
	}
	return s
}

// oidcRedirect is the harness client's registered redirect URI: nothing
// listens there; the test reads the redirect's Location.
const oidcRedirect = "http://127.0.0.1:1/callback"

func TestOIDCAuthorization(t *testing.T) {
	h := start(t, options{oidc: true})
	ctx := context.Background()
	req := agentapi.AuthorizationRequest{Scheme: "oidc"}
	a, err := h.client.Authorization(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.Authorization, "Bearer ") || !a.Cached || time.Until(a.ExpiresAt.Time) < time.Hour {
		t.Fatalf("%+v", a)
	}
	if st := h.business(t, a.Authorization); st != 200 {
		t.Fatalf("GetMyOrganizations answered %d", st)
	}
	// refresh: a new access token, saved for the CLI to see too.
	req.Refresh = true
	fresh, err := h.client.Authorization(ctx, req)
	if err != nil || fresh.Cached || fresh.Authorization == a.Authorization {
		t.Fatalf("refresh: %+v %v", fresh, err)
	}
	if rec, _ := h.store.Load("default"); rec.Header() != fresh.Authorization {
		t.Fatal("the refreshed token was not saved")
	}
	if h.business(t, fresh.Authorization) != 200 {
		t.Fatal("the refreshed token is refused")
	}
	if !strings.Contains(h.audit.String(), `"identity":"profile default (u1)"`) || strings.Contains(h.audit.String(), strings.TrimPrefix(fresh.Authorization, "Bearer ")) {
		t.Fatalf("audit: %s", h.audit.String())
	}
}

func TestOIDCSignInRequired(t *testing.T) {
	h := start(t, options{oidc: true})
	ctx := context.Background()
	wantConflict := func(t *testing.T, profile, text string) {
		t.Helper()
		_, err := h.client.Authorization(ctx, agentapi.AuthorizationRequest{Scheme: "oidc", Profile: profile})
		var ae *agentclient.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Body.Code != agentapi.CodeSignInRequired || !strings.Contains(ae.Body.Message, text) {
			t.Fatalf("err = %v", err)
		}
	}
	t.Run("never signed in", func(t *testing.T) { wantConflict(t, "nobody", "signagent oidc login --profile nobody") })
	t.Run("refresh token refused", func(t *testing.T) {
		rec, _ := h.store.Load("default")
		rec.Expiry, rec.RefreshToken = time.Now().Add(-time.Minute), "revoked-refresh-token"
		if err := h.store.Save(rec); err != nil {
			t.Fatal(err)
		}
		wantConflict(t, "default", "sign in again: signagent oidc login --profile default")
		if strings.Contains(h.logs.String(), "revoked-refresh-token") {
			t.Fatal("the refresh token is in the log")
		}
	})
	// A store the operator must repair (here: its mode) is the agent's
	// configuration, not the user's sign-in: 503, naming the fix.
	t.Run("store readable by others", func(t *testing.T) {
		os.Chmod(h.store.Path("default"), 0o644)
		_, err := h.client.Authorization(ctx, agentapi.AuthorizationRequest{Scheme: "oidc", Profile: "default"})
		var ae *agentclient.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Body.Code != agentapi.CodeNotConfigured || !strings.Contains(ae.Body.Message, "chmod 0600") {
			t.Fatalf("err = %v", err)
		}
	})
	_, err := h.client.Authorization(ctx, agentapi.AuthorizationRequest{Scheme: "oidc", Profile: "../etc"})
	var ae *agentclient.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		t.Fatalf("bad profile name: %v", err)
	}
}
