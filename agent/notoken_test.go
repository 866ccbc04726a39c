package agent_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/signagent/signagent/agentapi"
)

// TestAgentWithoutToken: an agent started for OpenID Connect and legacy
// passwords alone has no token: it is ready (its checks are oidc and
// legacy, no token), serves both schemes' headers and the proxy, and
// answers what needs the token (a signature, a certificate login) 503
// service_not_configured naming what is missing; /metrics has no token
// gauge.
func TestAgentWithoutToken(t *testing.T) {
	h := start(t, options{noToken: true, oidc: true, legacy: true, apiURL: "emu"})
	code, _, body := raw(t, h.sock, "GET", "/readyz", "")
	var ready agentapi.ReadyResponse
	if err := json.Unmarshal([]byte(body), &ready); err != nil || code != 200 || ready.Status != "ready" ||
		len(ready.Checks) != 2 || !ready.Checks["oidc"].Ready || !ready.Checks["legacy"].Ready || strings.Contains(body, `"token"`) {
		t.Fatalf("readyz %d %s", code, body)
	}
	for _, id := range []string{"oidc", "legacy login=alice@example.com"} {
		if resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", id, nil, ""); resp.StatusCode != 200 {
			t.Fatalf("%s through the proxy: %d %s", id, resp.StatusCode, body)
		}
	}
	for _, tc := range []struct{ path, body string }{
		{"/v1/signatures", `{"phone":"9161234567"}`},
		{"/v1/authorizations", `{"scheme":"legacy","by":"certificate"}`},
	} {
		code, _, body := raw(t, h.sock, "POST", tc.path, tc.body)
		if code != 503 || !strings.Contains(body, `"service_not_configured"`) || !strings.Contains(body, "this agent has no token") {
			t.Errorf("%s: %d %s", tc.path, code, body)
		}
	}
	_, _, metrics := raw(t, h.sock, "GET", "/metrics", "")
	if strings.Contains(metrics, "signagent_token_ready") || !strings.Contains(metrics, "signagent_requests_total") {
		t.Errorf("metrics of an agent without a token:\n%s", metrics)
	}
}
