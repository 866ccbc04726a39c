package tokencmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
	"github.com/signagent/signagent/pkcs11/probe"
)

// TestMain is the module probe's child when probe.Module starts this test
// binary as it starts signagent (a module is loaded in a child first).
func TestMain(m *testing.M) {
	probe.Run()
	os.Exit(m.Run())
}

// TestTokenFamily drives the token commands where no token is needed to
// answer: a module that is not there, a file that is no module (loaded in
// a child process first, as the agent probes it, so nothing here
// crashes), and token check's bounds, said before any module is loaded.
// The paths that reach a token run against SoftHSM in cmd/signagent.
func TestTokenFamily(t *testing.T) {
	clitest.Isolate(t)
	notModule := filepath.Join(t.TempDir(), "libnot.so")
	if err := os.WriteFile(notModule, []byte("not a library"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"tokens, no module", []string{"token", "list", "--module", "/nonexistent/libp11.so"}, cmdutil.ExitBadInput, "does not exist"},
		{"keys, no module", []string{"token", "keys", "--module", "/nonexistent/libp11.so"}, cmdutil.ExitBadInput, "does not exist"},
		{"keys, not a module", []string{"token", "keys", "--module", notModule}, cmdutil.ExitFailure, "not a PKCS#11 module"},
		{"check, rounds", []string{"token", "check", "--rounds", "0", "--module", notModule}, cmdutil.ExitBadInput, "--rounds 0: want 1 to 100"},
		{"check, removal timeout", []string{"token", "check", "--removal-timeout", "2h", "--module", notModule}, cmdutil.ExitBadInput, "--removal-timeout 2h0m0s: want 1s to 1h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := clitest.Run(t, "", tc.args...)
			if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Fatalf("exit %d (want %d), stdout %q, stderr %q (want one line naming %q)", code, tc.code, stdout, stderr, tc.want)
			}
		})
	}
}
