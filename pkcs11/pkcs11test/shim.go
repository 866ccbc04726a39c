package pkcs11test

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

//go:embed shim/shim.c
var shimSource string

// Shim builds the test module of shim/shim.c with gcc and returns its path.
// It wraps SoftHSM and, on request through its environment, hangs in
// C_Sign, crashes in C_Initialize, or has a PIN pad (SHIM_PINPAD_FILE): a
// real token cannot be made to do the first two when a test wants it, and
// SoftHSM has no reader to type on. The PKCS#11 headers are miekg/pkcs11's.
func Shim(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/miekg/pkcs11").Output()
	if err != nil {
		t.Fatalf("find the PKCS#11 headers: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "shim.c")
	if err := os.WriteFile(src, []byte(shimSource), 0o600); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libshim.so")
	cmd := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, "-I", strings.TrimSpace(string(out)), src, "-ldl")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the test module: %v\n%s", err, b)
	}
	return lib
}
