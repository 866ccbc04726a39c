package proxy

import (
	"strings"
	"testing"
)

// TestParseIdentityRefusesUnprintable: a selector with bytes that are not
// UTF-8, control, format (bidirectional overrides) or separator
// characters is refused before any of its values is looked at.
func TestParseIdentityRefusesUnprintable(t *testing.T) {
	for _, s := range []string{"legacy login=\xff\xfe@example.com", "legacy login=alice\u202e@example.com",
		"legacy login=a\u2028b", "legacy login=a\u0085b", "legacy login=a\x1bb", "oidc profile=" + strings.Repeat("a", 1100)} {
		if _, err := ParseIdentity(s, false); err == nil || !strings.Contains(err.Error(), "too long or not printable") {
			t.Errorf("%q: %v", s, err)
		}
	}
	if _, err := ParseIdentity("legacy login=алиса@пример.рф", false); err != nil {
		t.Errorf("a non-ASCII login: %v", err)
	}
}
