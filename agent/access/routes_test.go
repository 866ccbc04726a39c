package access

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/signagent/signagent/errdefs"
)

// TestParseRouteRules: a rule is CLASS=ROUTES; anything else is refused
// as invalid input naming the rule; a repeatable flag's pieces, split at
// its commas, are joined back into their rules.
func TestParseRouteRules(t *testing.T) {
	for _, bad := range []string{"uid=signatures", "uid:x=signatures", "tcp=everything", "web:1=sessions", "tcp", "unix:1=links"} {
		_, err := ParseRouteRule(bad)
		if err == nil || errdefs.Kind(err) != errdefs.ErrInvalidInput || !strings.Contains(err.Error(), fmt.Sprintf("route rule %q", bad)) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// --routes gid:2001=sessions,links --routes default= reaches the
	// parser split at its commas, as a repeatable flag's values are.
	rules, err := ParseRouteRules([]string{"gid:2001=sessions", "links", "gid:2002=signatures", "default="})
	if err != nil || len(rules) != 3 {
		t.Fatalf("the flag's pieces: %d rules, %v", len(rules), err)
	}
	if got := fmt.Sprint(rules); got != "[{gid:2001 [sessions links]} {gid:2002 [signatures]} {default []}]" {
		t.Fatalf("rules %s", got)
	}
	if _, err := ParseRouteRules([]string{"links"}); err == nil {
		t.Error("a route list with no class parsed")
	}
}

// TestRouteAllowed: the most specific rule naming the caller's class
// decides (uid, then gid, then unix or tcp, then default); a class no
// rule names, or no rules, leave the route open.
func TestRouteAllowed(t *testing.T) {
	unix := func(uid, gid int) context.Context {
		return context.WithValue(context.Background(), peerKey, PeerCred{UID: uid, GID: gid})
	}
	rules, err := ParseRouteRules([]string{"uid:1000=links", "gid:50=sessions", "unix=signatures", "default=authorizations"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ctx   context.Context
		route string
		want  bool
	}{
		{unix(1000, 50), "links", true},     // its uid's rule
		{unix(1000, 50), "sessions", false}, // not the gid's: the uid's rule decides
		{unix(1001, 50), "sessions", true},
		{unix(1001, 50), "links", false},
		{unix(1001, 51), "signatures", true}, // any Unix caller
		{unix(1001, 51), "sessions", false},
		{context.Background(), "authorizations", true}, // TCP: no tcp rule, the default's
		{context.Background(), "signatures", false},
	} {
		r := httptest.NewRequestWithContext(c.ctx, "GET", "/", nil)
		if got := RouteAllowed(rules, r, c.route); got != c.want {
			cred, _ := Peer(r)
			t.Errorf("caller %+v, route %s: %v, want %v", cred, c.route, got, c.want)
		}
	}
	if !RouteAllowed(nil, httptest.NewRequest("GET", "/", nil), "service") {
		t.Error("no rules closed a route")
	}
	tcpOnly := []RouteRule{{Class: "tcp", Routes: []string{"service"}}}
	if !RouteAllowed(tcpOnly, httptest.NewRequestWithContext(unix(1, 1), "GET", "/", nil), "links") {
		t.Error("a class no rule names was closed")
	}
}
