package settings

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadFileOldKeys: the keys renamed in this release are read as their
// new ones, at the top and in a context, with their lines; where a level
// gives both, the new one wins; Renamed lists each old key once, and a
// known that knows only the new names accepts the old ones.
func TestReadFileOldKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	body := "base-url: https://old.example\ncurrent-context: a\ncontexts:\n  a:\n    business-url: https://new.example\n    api-url: https://old.example\n    auth-url: https://idp.example\n  b:\n    auth-url: https://other.example\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	known := func(k string) bool { return !slices.Contains([]string{"base-url", "api-url", "auth-url"}, k) }
	f, err := ReadFile(p, "", true, known)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"trusted-url": "https://old.example", "business-url": "https://new.example", "oidc-url": "https://idp.example"} {
		if v, _ := f.Value(key); v != want {
			t.Errorf("%s: %v, want %s", key, v, want)
		}
	}
	for _, old := range []string{"base-url", "api-url", "auth-url"} {
		if _, ok := f.Value(old); ok {
			t.Errorf("the old key %s is still a value", old)
		}
	}
	if f.Where("trusted-url") != p+":1" || f.Where("oidc-url") != p+":7" {
		t.Errorf("where: %s, %s", f.Where("trusted-url"), f.Where("oidc-url"))
	}
	if want := []string{"api-url", "auth-url", "base-url"}; !slices.Equal(f.Renamed, want) {
		t.Errorf("Renamed %v, want %v", f.Renamed, want)
	}
	var said strings.Builder
	f.SayRenamedKeys(&said)
	if strings.Count(said.String(), "\n") != 3 || !strings.Contains(said.String(), "signagent: `auth-url (in "+p+")` is now `oidc-url`; the old name goes in the next release\n") {
		t.Errorf("said %q", said.String())
	}
}
