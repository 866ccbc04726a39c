package agent

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Guarded routes, by the names route rules use. Health, readiness and
// metrics are open to every caller the listener admits.
var guarded = map[string]string{
	"POST /v1/signatures": "signatures",
	"POST /v1/sessions":   "sessions",
	"DELETE /v1/sessions": "sessions",
	"POST /v1/links":      "links",
	proxyGet:              "service",
	proxyPost:             "service",
}

// RouteRule opens routes to a class of callers: "uid:N" or "gid:N" (Unix
// socket callers by SO_PEERCRED), "unix" (any Unix socket caller), "tcp"
// (any TCP caller), or "default" (callers no other rule names). A caller
// is held to the most specific rule that names it (uid, gid, unix or tcp,
// default); with no rules at all, every route is open.
type RouteRule struct {
	Class  string
	Routes []string // signatures, sessions, links, service; none: no route
}

// ParseRouteRule parses CLASS=ROUTE[,ROUTE...], e.g. "gid:50=signatures",
// "tcp=sessions", "default=" (nothing).
func ParseRouteRule(s string) (RouteRule, error) {
	class, list, ok := strings.Cut(s, "=")
	bad := func(why string) error {
		return fmt.Errorf("route rule %q: %s; want CLASS=ROUTES, CLASS one of uid:N, gid:N, unix, tcp, default, ROUTES from signatures, sessions, links, service", s, why)
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
		if name != "signatures" && name != "sessions" && name != "links" && name != "service" {
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
		return true
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
