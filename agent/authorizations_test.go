package agent_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/schemes"
)

// business calls GetMyOrganizations on the emulator with header.
func (h *harness) business(t *testing.T, header string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.emu.URL()+"/GetMyOrganizations?autoRegister=false", nil)
	req.Header.Set("Authorization", header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestLegacyAuthorizations(t *testing.T) {
	h := start(t, options{legacy: true})
	ctx := context.Background()
	snils := &agentapi.Credential{SNILS: "11223344595"}
	for name, req := range map[string]agentapi.AuthorizationRequest{
		"password":    {Scheme: "legacy", By: "password", Login: "alice@example.com"},
		"certificate": {Scheme: "legacy", By: "certificate"},
		"sid chain":   {Scheme: "legacy", By: "sid", Credential: snils, ServiceUserID: "crm-42"},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := h.client.Authorization(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(a.Authorization, "ServiceAuth ddauth_api_client_id="+devKey+",ddauth_token=") || a.Cached || a.ExpiresAt.IsZero() {
				t.Fatalf("%+v", a)
			}
			if st := h.business(t, a.Authorization); st != 200 {
				t.Fatalf("GetMyOrganizations answered %d", st)
			}
			again, err := h.client.Authorization(ctx, req)
			if err != nil || !again.Cached || again.Authorization != a.Authorization {
				t.Fatalf("second ask: %+v %v", again, err)
			}
			req.Refresh = true
			fresh, err := h.client.Authorization(ctx, req)
			if err != nil || fresh.Cached || fresh.Authorization == a.Authorization {
				t.Fatalf("refresh: %+v %v", fresh, err)
			}
		})
	}
	// The sid that the sid chain obtained is the session cache's: a
	// /v1/sessions for the same user is answered from it.
	s, err := h.client.Session(ctx, agentapi.SessionRequest{Credential: *snils, ServiceUserID: "crm-42"})
	if err != nil || !s.Cached {
		t.Fatalf("session after the chain: %+v %v", s, err)
	}
	// A given sid.
	a, err := h.client.Authorization(ctx, agentapi.AuthorizationRequest{Scheme: "legacy", By: "sid", Sid: s.Sid})
	if err != nil || h.business(t, a.Authorization) != 200 {
		t.Fatalf("given sid: %v", err)
	}
	for _, secret := range []string{devKey, alicePassword, s.Sid, strings.TrimPrefix(a.Authorization, "ServiceAuth ddauth_api_client_id="+devKey+",ddauth_token=")} {
		if strings.Contains(h.logs.String(), secret) || strings.Contains(h.audit.String(), secret) {
			t.Fatalf("a secret in the log or audit:\n%s\n%s", h.logs.String(), h.audit.String())
		}
	}
	if !strings.Contains(h.audit.String(), `"identity":"password alice@example.com"`) {
		t.Fatalf("the audit does not say whose authorization:\n%s", h.audit.String())
	}
	if m := h.metric(t, `signagent_authorizations_total{result="cached",scheme="legacy"}`); m != "3" {
		t.Fatalf("cached authorizations metric %s", m)
	}
}

func TestLegacyAuthorizationsSingleFlight(t *testing.T) {
	h := start(t, options{legacy: true})
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.client.Authorization(context.Background(), agentapi.AuthorizationRequest{Scheme: "legacy", By: "certificate"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := h.emu.Stats().LegacyTokens; n != 1 {
		t.Fatalf("16 callers at once: %d logins", n)
	}
}

func TestLegacyAuthorizationRefusals(t *testing.T) {
	h := start(t, options{legacy: true})
	ctx := context.Background()
	// The schemes an unknown one is told of are the list's.
	var names []string
	for _, e := range schemes.List() {
		names = append(names, e.Name)
	}
	served := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	for _, tc := range []struct {
		name   string
		req    agentapi.AuthorizationRequest
		status int
		want   string
	}{
		{"unknown scheme", agentapi.AuthorizationRequest{Scheme: "kerberos"}, 400, `scheme "kerberos": want ` + served},
		{"unknown scheme with a way in", agentapi.AuthorizationRequest{Scheme: "kerberos", By: "password"}, 400, "kerberos password does not take by"},
		{"unknown way", agentapi.AuthorizationRequest{Scheme: "legacy", By: "telepathy"}, 400, "not a way to authenticate"},
		{"login not configured", agentapi.AuthorizationRequest{Scheme: "legacy", By: "password", Login: "carol@example.com"}, 400, "no password for login"},
		{"wrong password configured", agentapi.AuthorizationRequest{Scheme: "legacy", By: "password", Login: "bob@example.com"}, 422, "Wrong password"},
		{"sid and credential", agentapi.AuthorizationRequest{Scheme: "legacy", By: "sid", Sid: "x", Credential: &agentapi.Credential{Phone: "9161234567"}}, 400, "not both"},
		{"sid chain without user id", agentapi.AuthorizationRequest{Scheme: "legacy", By: "sid", Credential: &agentapi.Credential{Phone: "9161234567"}}, 400, "by sid needs sid, or credential and serviceUserId"},
		{"sid chain with a long user id", agentapi.AuthorizationRequest{Scheme: "legacy", By: "sid", Credential: &agentapi.Credential{Phone: "9161234567"}, ServiceUserID: strings.Repeat("y", 300)}, 400, "longer than 256 bytes"},
		{"sid chain with a control character", agentapi.AuthorizationRequest{Scheme: "legacy", By: "sid", Credential: &agentapi.Credential{Phone: "9161234567"}, ServiceUserID: "crm\r\n42"}, 400, "control characters"},
		{"unknown sid", agentapi.AuthorizationRequest{Scheme: "legacy", By: "sid", Sid: "no-such-sid"}, 422, "Auth.InvalidSid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.client.Authorization(ctx, tc.req)
			e := apiErr(t, err)
			if e.Status != tc.status || !strings.Contains(e.Body.Message, tc.want) {
				t.Fatalf("got %d %q, want %d %q", e.Status, e.Body.Message, tc.status, tc.want)
			}
		})
	}
	if strings.Contains(h.logs.String(), "not bob's password") || strings.Contains(h.logs.String(), devKey) {
		t.Fatal("a secret in the log")
	}
	// Without the legacy scheme configured.
	h.reload(t, func(c *agent.Config) { c.Schemes.Legacy = nil })
	_, err := h.client.Authorization(ctx, agentapi.AuthorizationRequest{Scheme: "legacy", By: "certificate"})
	if e := apiErr(t, err); e.Status != 503 || !strings.Contains(e.Body.Message, "--business-url") {
		t.Fatalf("%d %q", e.Status, e.Body.Message)
	}
}

// TestLegacyHeaderPolicy: by default the agent hands out no legacy header
// (it holds the developer key) and says to use the proxy, which still
// serves the identity.
func TestLegacyHeaderPolicy(t *testing.T) {
	h := start(t, options{legacy: true, hideLegacy: true, apiURL: "emu"})
	code, _, body := raw(t, h.sock, "POST", "/v1/authorizations", `{"scheme":"legacy","by":"password","login":"alice@example.com"}`)
	if code != 403 || !strings.Contains(body, "/v1/service/") || !strings.Contains(body, "--expose-legacy-header") || strings.Contains(body, devKey) {
		t.Fatalf("legacy header handed out by default: %d %s", code, body)
	}
	if resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "legacy login=alice@example.com", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("the proxy with the same identity: %d %s", resp.StatusCode, body)
	}
}

// TestCertificateLoginOff: with --certificate-login=false a certificate
// identity is refused before the token is asked to decrypt anything.
func TestCertificateLoginOff(t *testing.T) {
	h2 := start(t, options{legacy: true, apiURL: "emu", noCertLogin: true})
	challenges := h2.emu.Stats().LegacyChallenges
	for _, r := range []func() (int, string){
		func() (int, string) {
			c, _, b := raw(t, h2.sock, "POST", "/v1/authorizations", `{"scheme":"legacy","by":"certificate"}`)
			return c, b
		},
		func() (int, string) {
			resp, b := h2.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "legacy certificate", nil, "")
			return resp.StatusCode, b
		},
	} {
		if code, body := r(); code != 403 || !strings.Contains(body, "--certificate-login=false") {
			t.Fatalf("certificate login turned off: %d %s", code, body)
		}
	}
	if h2.emu.Stats().LegacyChallenges != challenges {
		t.Fatalf("a challenge was asked for with certificate login off")
	}
}

// TestRefreshFloor: fifty sequential "refresh": true for one identity
// make one login, not fifty (before the floor each made a password login,
// a refresh grant or a trusted flow with a signature); the proxy's retry
// after a 401 still replaces the refused value at once.
func TestRefreshFloor(t *testing.T) {
	h := start(t, options{legacy: true, oidc: true, apiURL: "emu", floor: 30 * time.Second})
	before := h.emu.Stats()
	for _, req := range []string{
		`{"scheme":"legacy","by":"password","login":"alice@example.com","refresh":true}`,
		`{"scheme":"legacy","by":"sid","credential":{"snils":"11223344595"},"serviceUserId":"crm-42","refresh":true}`,
		`{"scheme":"oidc","refresh":true}`,
	} {
		for i := range 50 {
			if code, _, body := raw(t, h.sock, "POST", "/v1/authorizations", req); code != 200 {
				t.Fatalf("%s #%d: %d %s", req, i, code, body)
			}
		}
	}
	for i := range 50 {
		if code, _, body := raw(t, h.sock, "POST", "/v1/sessions", `{"phone":"9161234567","serviceUserId":"crm-42","refresh":true}`); code != 200 {
			t.Fatalf("session #%d: %d %s", i, code, body)
		}
	}
	after := h.emu.Stats()
	// One password login and one sid exchange (Authenticate), one trusted
	// flow per credential (the SNILS chain, the phone session), and no
	// refresh grant (alice's access token is young).
	if got := after.LegacyTokens - before.LegacyTokens; got != 2 {
		t.Errorf("legacy logins: %d, want 2", got)
	}
	if got := after.Sessions - before.Sessions; got != 2 {
		t.Errorf("trusted sessions: %d, want 2", got)
	}
	if got := after.Refreshes - before.Refreshes; got != 0 {
		t.Errorf("refresh grants: %d, want 0", got)
	}
	// A value the service refuses is still replaced at once: the proxy's
	// retry logs in again.
	h.emu.InjectFaults("GetMyOrganizations", emuStatus(401))
	if resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "legacy login=alice@example.com", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("retry after a refused value: %d %s", resp.StatusCode, body)
	}
	if got := h.emu.Stats().LegacyTokens - after.LegacyTokens; got != 1 {
		t.Errorf("the refused value was not replaced: %d new logins", got)
	}
}
