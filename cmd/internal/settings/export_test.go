package settings

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Export puts the chosen context's softhsm2-conf in SOFTHSM2_CONF, where
// SoftHSM looks for it, unless the variable is set (it beats the file); a
// relative path is refused with the file's line.
func TestExportSoftHSMConf(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	body := "current-context: a\ncontexts:\n  a:\n    softhsm2-conf: /srv/hsm/softhsm2.conf\n  b:\n    softhsm2-conf: hsm/softhsm2.conf\n  c: {}\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func(context string) *File {
		f, err := ReadFile(p, context, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	t.Setenv("SOFTHSM2_CONF", "") // restored after the test
	os.Unsetenv("SOFTHSM2_CONF")
	if err := read("").Export(); err != nil {
		t.Fatal(err)
	}
	if got := os.Getenv("SOFTHSM2_CONF"); got != "/srv/hsm/softhsm2.conf" {
		t.Fatalf("SOFTHSM2_CONF = %q, want the context's", got)
	}
	t.Setenv("SOFTHSM2_CONF", "/elsewhere.conf")
	if err := read("a").Export(); err != nil || os.Getenv("SOFTHSM2_CONF") != "/elsewhere.conf" {
		t.Fatalf("the variable set: %v, %q; want it kept", err, os.Getenv("SOFTHSM2_CONF"))
	}
	os.Unsetenv("SOFTHSM2_CONF")
	err := read("b").Export()
	if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "config.yaml:6: softhsm2-conf: want an absolute path") {
		t.Fatalf("a relative path: %v", err)
	}
	if _, set := os.LookupEnv("SOFTHSM2_CONF"); set {
		t.Fatal("a refused path was exported")
	}
	if err := read("c").Export(); err != nil {
		t.Fatal(err)
	}
	if _, set := os.LookupEnv("SOFTHSM2_CONF"); set {
		t.Fatal("a context without softhsm2-conf exported one")
	}
}
