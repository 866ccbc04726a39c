package agent

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

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

// RouteNames are the names route rules use, in the order help lists them.
var RouteNames = []string{"signatures", "sessions", "links", "authorizations", "service"}

// RouteRule opens routes to a class of callers: "uid:N" or "gid:N" (Unix
// socket callers by SO_PEERCRED), "unix" (any Unix socket caller), "tcp"
// (any TCP caller), or "default" (callers no other rule names). A caller
// is held to the most specific rule that names it (uid, gid, unix or tcp,
// default); with no rules at all, every route is open.
type RouteRule struct {
	Class  string
	Routes []string // from RouteNames; none: no route
}

// ParseRouteRule parses CLASS=ROUTE[,ROUTE...], e.g. "gid:50=signatures",
// "tcp=sessions", "default=" (nothing).
func ParseRouteRule(s string) (RouteRule, error) {
	class, list, ok := strings.Cut(s, "=")
	bad := func(why string) error {
		return fmt.Errorf("route rule %q: %s; want CLASS=ROUTES, CLASS one of uid:N, gid:N, unix, tcp, default, ROUTES from %s", s, why, strings.Join(RouteNames, ", "))
	}
	if !ok {
		return RouteRule{}, bad("no '='")
	}
	switch kind, n, _ := strings.Cut(class, ":"); kind {
	case "uid", "gid":
		if _, err := strconv.Atoi(n); err != nil {
			return RouteRule{}, bad("not a number after " + kind + ":")
		}
	case "unix", "tcp", "default":
		if n != "" {
			return RouteRule{}, bad("unexpected ':'")
		}
	default:
		return RouteRule{}, bad("unknown class")
	}
	r := RouteRule{Class: class}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(RouteNames, name) {
			return RouteRule{}, bad("unknown route " + strconv.Quote(name))
		}
		r.Routes = append(r.Routes, name)
	}
	return r, nil
}

// routeAllowed reports whether the caller of r may use route (METHOD PATH).
func (a *Agent) routeAllowed(r *http.Request, route string) bool {
	rt, known := routeNamed(route)
	if !known {
		// "other" (no such route: 404 or 405 follows); anything else is
		// closed.
		return route == "other"
	}
	if rt.rule == "" {
		return true
	}
	name := rt.rule
	rules := a.now().rules
	if len(rules) == 0 {
		return true
	}
	var classes []string
	if cred, ok := access.Peer(r); ok {
		classes = []string{fmt.Sprintf("uid:%d", cred.UID), fmt.Sprintf("gid:%d", cred.GID), "unix"}
	} else {
		classes = []string{"tcp"}
	}
	for _, c := range append(classes, "default") {
		for _, rule := range rules {
			if rule.Class == c {
				return slices.Contains(rule.Routes, name)
			}
		}
	}
	return true
}

// ParseRouteRules parses each of specs (the repeatable --routes).
func ParseRouteRules(specs []string) ([]RouteRule, error) {
	// A repeatable flag's value is split at commas before it gets here
	// (--routes gid:2001=sessions,links arrives as "gid:2001=sessions"
	// and "links"): a piece without '=' continues the rule before it.
	var joined []string
	for _, r := range specs {
		if n := len(joined); n > 0 && !strings.Contains(r, "=") && strings.TrimSpace(r) != "" {
			joined[n-1] += "," + r
			continue
		}
		joined = append(joined, r)
	}
	var out []RouteRule
	for _, r := range joined {
		rule, err := ParseRouteRule(r)
		if err != nil {
			return nil, badConfig(err)
		}
		out = append(out, rule)
	}
	return out, nil
}
