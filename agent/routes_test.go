package agent_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agent/access"
)

// guardedRequests is one request per guarded route, by route rule name.
// Their bodies need not succeed: a route that is open answers anything but
// the route rule's 403.
var guardedRequests = []struct {
	rule, method, path, body string
}{
	{"signatures", "POST", "/v1/signatures", `{"phone":"9161234567"}`},
	{"sessions", "POST", "/v1/sessions", `{"phone":"9161234567","serviceUserId":"crm-42"}`},
	{"sessions", "DELETE", "/v1/sessions?phone=9161234567&serviceUserId=crm-42", ""},
	{"links", "POST", "/v1/links", `{"phone":"9161234567","serviceUserId":"crm-42"}`},
	{"authorizations", "POST", "/v1/authorizations", `{"scheme":"oidc"}`},
	{"authorizations", "GET", "/v1/identities", ""},
	{"service", "GET", "/v1/service/GetMyOrganizations?autoRegister=false", ""},
	{"service", "POST", "/v1/service/GetMyOrganizations?autoRegister=false", "{}"},
}

// TestRouteMatrix walks every guarded route for every route rule name: a
// caller allowed only that name is refused (403, the route rules) on
// every route of the other names, and not refused on its own. It is the
// matrix the README's "Routes per caller class" promises; before
// authorizations was a rule name, POST /v1/authorizations was served to a
// caller allowed only signatures.
func TestRouteMatrix(t *testing.T) {
	h := start(t, options{oidc: true, apiURL: "emu"})
	var matrix []string
	for _, name := range access.RouteNames {
		h.reload(t, func(c *agent.Config) { c.Routes = []access.RouteRule{{Class: "default", Routes: []string{name}}} })
		row := fmt.Sprintf("%-15s", name+":")
		for _, r := range guardedRequests {
			code, _, body := raw(t, h.sock, r.method, r.path, r.body)
			refused := code == 403 && strings.Contains(body, "route rules")
			if refused == (r.rule == name) {
				t.Errorf("allowed only %s: %s %s answered %d %s", name, r.method, r.path, code, body)
			}
			mark := "open"
			if refused {
				mark = "403"
			}
			row += fmt.Sprintf(" %s %s=%s", r.method, strings.TrimPrefix(r.path, "/v1/"), mark)
		}
		matrix = append(matrix, row)
	}
	t.Logf("route matrix (allowed only ... : answers):\n%s", strings.Join(matrix, "\n"))
	// An empty list closes every guarded route and nothing else.
	h.reload(t, func(c *agent.Config) { c.Routes = []access.RouteRule{{Class: "default"}} })
	for _, r := range guardedRequests {
		if code, _, _ := raw(t, h.sock, r.method, r.path, r.body); code != 403 {
			t.Errorf("no route open: %s %s answered %d", r.method, r.path, code)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _, _ := raw(t, h.sock, "GET", p, ""); code == 403 {
			t.Errorf("GET %s refused by the route rules", p)
		}
	}
}

// TestEveryRouteHasARule: each route the agent serves is either guarded
// by a rule name or one of the open ones (health, readiness, metrics), and
// the test's walk covers every guarded route.
func TestEveryRouteHasARule(t *testing.T) {
	for _, name := range access.RouteNames {
		if !slices.ContainsFunc(agent.Routes, func(r string) bool { rule, _ := agent.RouteGuard(r); return rule == name }) {
			t.Errorf("the route rule name %s guards no route", name)
		}
	}
	if _, open := agent.RouteGuard("PUT /v1/nothing"); open {
		t.Error("a route not in the table is open")
	}
	for _, route := range agent.Routes {
		name, open := agent.RouteGuard(route)
		if !open && !slices.Contains(access.RouteNames, name) {
			t.Errorf("%s has no route rule name and is not open", route)
		}
		if open {
			continue
		}
		method, path, _ := strings.Cut(route, " ")
		path = strings.Replace(path, "{method}", "GetMyOrganizations", 1)
		if !slices.ContainsFunc(guardedRequests, func(r struct{ rule, method, path, body string }) bool {
			p, _, _ := strings.Cut(r.path, "?")
			return r.method == method && p == path && r.rule == name
		}) {
			t.Errorf("the route matrix does not walk %s (rule %s)", route, name)
		}
	}
}
