package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/authz"
)

// The index lists each identity once, masked, drops it when its header
// expires or is refused, and stays within its bound.
func TestHeldIdentities(t *testing.T) {
	var h held
	now := time.Now()
	value := "Bearer eyJhbGciOiJSUzI1NiJ9.secret-part-of-the-token.signature"
	h.note("oidc", "profile default", authz.Header{Value: value, ExpiresAt: now.Add(time.Hour), Subject: "alice"}, now)
	h.note("oidc", "profile default", authz.Header{Value: value, ExpiresAt: now.Add(time.Hour)}, now.Add(time.Second))
	h.note("legacy", "login bob", authz.Header{Value: "ServiceAuth x", ExpiresAt: now.Add(time.Minute)}, now)
	l := h.list(now)
	if len(l) != 2 || l[0].Scheme != "legacy" || l[1].Uses != 2 || l[1].Subject != "alice" {
		t.Fatalf("list: %+v", l)
	}
	if strings.Contains(l[1].Header, "secret-part") || l[1].Header == "" {
		t.Fatalf("header not masked: %q", l[1].Header)
	}
	if l := h.list(now.Add(2 * time.Minute)); len(l) != 1 || l[0].Scheme != "oidc" {
		t.Fatalf("after the legacy header expired: %+v", l)
	}
	h.forget("oidc", "profile default")
	if l := h.list(now); len(l) != 0 {
		t.Fatalf("after forget: %+v", l)
	}
	for i := range maxHeld + 10 {
		h.note("x", string(rune('a'+i%26))+time.Duration(i).String(), authz.Header{Value: "v", ExpiresAt: now.Add(time.Hour)}, now.Add(time.Duration(i)))
	}
	if n := len(h.list(now)); n > maxHeld {
		t.Fatalf("%d entries, bound %d", n, maxHeld)
	}
}
