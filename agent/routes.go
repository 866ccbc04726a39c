package agent

import (
	"net/http"

	"github.com/signagent/signagent/agent/access"
	"github.com/signagent/signagent/agent/proxy"
)

// body says which limit bounds a route's request body.
type body int

const (
	apiBody     body = iota // --max-body: the API's JSON requests
	serviceBody             // --service-max-body: proxied business calls
)

// route is one row of the route table: the method and path, the route
// rule name that guards it ("" for a route open to every caller the
// listener admits), the body limit, and its handler (nil for the proxy,
// which is dispatched by path prefix before the mux).
type route struct {
	method, path string
	rule         string
	body         body
	handler      func(a *Agent) http.HandlerFunc
}

// routeTable is the API. The mux, the route rules, the metrics labels, the
// body limits and the OpenAPI comparison (Routes) all come from it: a route
// cannot be served without a rule or an explicit "open" here.
var routeTable = []route{
	{"POST", "/v1/signatures", "signatures", apiBody, func(a *Agent) http.HandlerFunc { return a.signature }},
	{"POST", "/v1/sessions", "sessions", apiBody, func(a *Agent) http.HandlerFunc { return a.session }},
	{"DELETE", "/v1/sessions", "sessions", apiBody, func(a *Agent) http.HandlerFunc { return a.dropSession }},
	{"POST", "/v1/links", "links", apiBody, func(a *Agent) http.HandlerFunc { return a.link }},
	{"POST", "/v1/authorizations", "authorizations", apiBody, func(a *Agent) http.HandlerFunc { return a.authorization }},
	{"GET", "/v1/identities", "authorizations", apiBody, func(a *Agent) http.HandlerFunc { return a.identities }},
	{"GET", proxy.Prefix + "{method}", "service", serviceBody, nil},
	{"POST", proxy.Prefix + "{method}", "service", serviceBody, nil},
	{"GET", "/healthz", "", apiBody, func(a *Agent) http.HandlerFunc { return a.healthz }},
	{"GET", "/livez", "", apiBody, func(a *Agent) http.HandlerFunc { return a.healthz }},
	{"GET", "/readyz", "", apiBody, func(a *Agent) http.HandlerFunc { return a.readyz }},
	{"GET", "/metrics", "", apiBody, func(a *Agent) http.HandlerFunc { return a.metrics.Handler().ServeHTTP }},
}

// name is the route as Routes, the metrics and the audit log name it.
func (r route) name() string { return r.method + " " + r.path }

// Routes lists the API's routes (METHOD PATH) from the route table;
// docs/openapi.yaml is checked against it.
var Routes = func() []string {
	out := make([]string, len(routeTable))
	for i, r := range routeTable {
		out[i] = r.name()
	}
	return out
}()

// The proxy's routes as Routes, the metrics and the route rules name them.
var (
	proxyGet  = "GET " + proxy.Prefix + "{method}"
	proxyPost = "POST " + proxy.Prefix + "{method}"
)

// routeIndex is the route table by name, for the per-request lookups.
var routeIndex = func() map[string]route {
	m := make(map[string]route, len(routeTable))
	for _, r := range routeTable {
		m[r.name()] = r
	}
	return m
}()

// routeNamed returns the table's row for name (METHOD PATH).
func routeNamed(name string) (route, bool) {
	r, ok := routeIndex[name]
	return r, ok
}

// RouteGuard returns the rule name that guards route (METHOD PATH, as in
// Routes), or open when every admitted caller may use it.
func RouteGuard(name string) (rule string, open bool) {
	r, ok := routeNamed(name)
	if !ok {
		return "", false
	}
	return r.rule, r.rule == ""
}

// routeAllowed reports whether the caller of r may use route (METHOD
// PATH) under the current route rules.
func (a *Agent) routeAllowed(r *http.Request, route string) bool {
	rt, known := routeNamed(route)
	if !known {
		// "other" (no such route: 404 or 405 follows); anything else is
		// closed.
		return route == "other"
	}
	return rt.rule == "" || access.RouteAllowed(a.now().rules, r, rt.rule)
}
