package access

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/signagent/signagent/errdefs"
)

// RouteNames are the names route rules use (the route table's rules), in
// the order help lists them.
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
// "tcp=sessions", "default=" (nothing). Its errors are invalid input.
func ParseRouteRule(s string) (RouteRule, error) {
	class, list, ok := strings.Cut(s, "=")
	bad := func(why string) error {
		return errdefs.Mark(fmt.Errorf("route rule %q: %s; want CLASS=ROUTES, CLASS one of uid:N, gid:N, unix, tcp, default, ROUTES from %s",
			s, why, strings.Join(RouteNames, ", ")), errdefs.ErrInvalidInput)
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
			return nil, err
		}
		out = append(out, rule)
	}
	return out, nil
}

// RouteAllowed reports whether rules let the caller of r use the route
// named name (one of RouteNames): the most specific rule naming the
// caller's class decides; no rule for it, or no rules, leave it open.
func RouteAllowed(rules []RouteRule, r *http.Request, name string) bool {
	if len(rules) == 0 {
		return true
	}
	var classes []string
	if cred, ok := Peer(r); ok {
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
