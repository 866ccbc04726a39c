package agent

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Guarded routes, by the names route rules use. Every route of Routes is
// either guarded here or listed in openRoutes (a test checks it); a route
// in neither is closed to every caller while rules are set.
var guarded = map[string]string{
	"POST /v1/signatures":     "signatures",
	"POST /v1/sessions":       "sessions",
	"DELETE /v1/sessions":     "sessions",
	"POST /v1/links":          "links",
	"POST /v1/authorizations": "authorizations",
	proxyGet:                  "service",
	proxyPost:                 "service",
}

// openRoutes are open to every caller the listener admits: health,
// readiness and metrics.
var openRoutes = []string{"GET /healthz", "GET /readyz", "GET /metrics"}

// RouteGuard returns the rule name that guards route (METHOD PATH, as in
// Routes), or open when every admitted caller may use it.
func RouteGuard(route string) (name string, open bool) {
	if slices.Contains(openRoutes, route) {
		return "", true
	}
	return guarded[route], false
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

// SetRouteRules replaces the route rules (configuration reload).
func (a *Agent) SetRouteRules(rules []RouteRule) {
	a.rules.Store(&rules)
}

// routeAllowed reports whether the caller of r may use route (METHOD PATH).
func (a *Agent) routeAllowed(r *http.Request, route string) bool {
	name, ok := guarded[route]
	if !ok {
		// Open routes, and "other" (no such route: 404 or 405 follows).
		return route == "other" || slices.Contains(openRoutes, route)
	}
	p := a.rules.Load()
	if p == nil || len(*p) == 0 {
		return true
	}
	rules := *p
	var classes []string
	if cred, ok := r.Context().Value(peerKey).(PeerCred); ok {
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
	var out []RouteRule
	for _, r := range specs {
		rule, err := ParseRouteRule(r)
		if err != nil {
			return nil, badConfig(err)
		}
		out = append(out, rule)
	}
	return out, nil
}
