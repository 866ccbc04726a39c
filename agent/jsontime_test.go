package agent_test

import (
	"regexp"
	"testing"
)

// rfc3339 finds every RFC 3339 time in a JSON text; msUTC is the one
// shape the agent writes (agentapi.Time).
var (
	rfc3339 = regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[^"]*"`)
	msUTC   = regexp.MustCompile(`^"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"$`)
)

// TestJSONTimesMilliseconds: every time in the agent's JSON answers, of
// every answer that carries one (a session, an authorization of each
// scheme, the identities held, the token's state in /readyz), is RFC 3339
// in UTC with exactly three fractional digits.
func TestJSONTimesMilliseconds(t *testing.T) {
	h := start(t, options{legacy: true, oidc: true, apiURL: "emu"})
	seen := 0
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/sessions", `{"phone":"9161234567","serviceUserId":"crm-42"}`},
		{"POST", "/v1/authorizations", `{"scheme":"legacy","by":"password","login":"alice@example.com"}`},
		{"POST", "/v1/authorizations", `{"scheme":"oidc"}`},
		{"GET", "/v1/identities", ""},
		{"GET", "/readyz", ""},
	} {
		code, _, body := raw(t, h.sock, c.method, c.path, c.body)
		if code != 200 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, code, body)
		}
		times := rfc3339.FindAllString(body, -1)
		if len(times) == 0 {
			t.Errorf("%s %s: no time in %s", c.method, c.path, body)
		}
		for _, ts := range times {
			seen++
			if !msUTC.MatchString(ts) {
				t.Errorf("%s %s: %s is not RFC 3339 UTC with milliseconds: %s", c.method, c.path, ts, body)
			}
		}
	}
	t.Logf("%d times checked", seen)
}
