package settings

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A settings file another user owns is refused, as ssh refuses such a
// configuration: that user could make every command sign with another key
// or send the API key elsewhere. Making a file another user's needs root
// (CI runs the tests as root).
func TestReadFileRefusesAnotherUsersFile(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte("token-label: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(p, "", true, nil); err != nil {
		t.Fatalf("root's own file: %v", err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(p, "", true, nil)
	if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "belongs to another user (uid 65534)") {
		t.Fatalf("another user's file: %v", err)
	}
}

// The chosen context's keys beat the top's; the top serves every context.
func TestReadFileContexts(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	body := "api-url: https://top.example\nspace: all\ncurrent-context: a\ncontexts:\n  a:\n    api-url: https://a.example\n  b: {}\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ctx, want string }{{"", "https://a.example"}, {"a", "https://a.example"}, {"b", "https://top.example"}} {
		f, err := ReadFile(p, tc.ctx, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := f.Value("api-url"); v != tc.want {
			t.Errorf("context %q: api-url %v, want %s", tc.ctx, v, tc.want)
		}
		if v, _ := f.Value("space"); v != "all" {
			t.Errorf("context %q: space %v, want the top's", tc.ctx, v)
		}
	}
	if f, _ := ReadFile(p, "b", true, nil); f.Where("api-url") != p+":1" {
		t.Errorf("where: %s", f.Where("api-url"))
	}
}

// Repeated and nested errors are named once, in one line.
func TestJoin(t *testing.T) {
	a, b := errors.New("a bad"), errors.New("b bad")
	err := Join(nil, a, errors.Join(b, a), Join(b))
	if err == nil || err.Error() != "a bad; b bad" || !errors.Is(err, b) {
		t.Fatalf("%v", err)
	}
	if Join(nil, Join()) != nil {
		t.Fatal("nothing joined is no error")
	}
}
