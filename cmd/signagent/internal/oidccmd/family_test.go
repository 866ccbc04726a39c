package oidccmd_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
	"github.com/signagent/signagent/oidc"
)

// TestOIDCFamily drives the OpenID Connect commands over a token store
// in the test's directory, holding a profile signed in beforehand (its
// record written as login writes it): status shows it without a token,
// token prints its access token (fresh: nothing is refreshed, so no
// provider is needed), logout --local-only removes it, and the profile
// is then signed out.
func TestOIDCFamily(t *testing.T) {
	clitest.Isolate(t)
	dir := filepath.Join(t.TempDir(), "tokens")
	rec := &oidc.Record{Version: 1, Profile: "robot", AuthURL: "https://idp.example", ClientID: "crm-app", Subject: "u-42", Email: "robot@example.com",
		Scopes: []string{"openid", "Service.PublicAPI.Staging"}, AccessToken: "access-token-of-the-test", TokenType: "Bearer",
		Expiry: time.Now().Add(time.Hour), RefreshToken: "refresh-token-of-the-test", SignedInAt: time.Now()}
	if err := (oidc.Files{Dir: dir}).Save(rec); err != nil {
		t.Fatal(err)
	}
	store := []string{"--profile", "robot", "--token-store", dir}

	code, out, stderr := clitest.Run(t, "", append([]string{"oidc", "status", "--json"}, store...)...)
	var st map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || strings.Contains(out, "access-token-of-the-test") || strings.Contains(out, "refresh-token-of-the-test") {
		t.Fatalf("status: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if st["signedIn"] != true || st["subject"] != "u-42" || st["space"] != "staging" {
		t.Fatalf("status: %q", out)
	}
	code, out, _ = clitest.Run(t, "", append([]string{"oidc", "status"}, store...)...)
	if code != 0 || !strings.Contains(out, "u-42 (robot@example.com)") {
		t.Fatalf("status does not name the user: exit %d, %q", code, out)
	}

	code, out, stderr = clitest.Run(t, "", append([]string{"oidc", "token"}, store...)...)
	if code != 0 || out != "access-token-of-the-test\n" {
		t.Fatalf("token: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	code, out, stderr = clitest.Run(t, "", append([]string{"oidc", "logout", "--local-only"}, store...)...)
	if code != 0 || !strings.Contains(out, "the tokens of profile robot are removed") {
		t.Fatalf("logout: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, _, stderr = clitest.Run(t, "", append([]string{"oidc", "token"}, store...)...)
	if code != cmdutil.ExitSignIn {
		t.Fatalf("token after logout: exit %d, stderr %q", code, stderr)
	}
}
