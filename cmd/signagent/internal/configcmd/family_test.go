package configcmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
)

// TestConfigFamily drives the commands about signagent itself: config
// writes the settings file (mode 0600) and reads it back, by context;
// version prints the build; completion and man write their scripts.
func TestConfigFamily(t *testing.T) {
	clitest.Isolate(t)
	run := func(args ...string) string {
		t.Helper()
		code, out, stderr := clitest.Run(t, "", args...)
		if code != 0 {
			t.Fatalf("signagent %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
		return out
	}
	run("config", "set", "log-level", "debug")
	run("config", "set", "--context", "ci", "business-url", "https://api.example")
	run("config", "use-context", "ci")
	if got := run("config", "get", "business-url"); got != "https://api.example\n" {
		t.Fatalf("config get business-url in ci: %q", got)
	}
	if got := run("config", "contexts"); !strings.Contains(got, "* ci") {
		t.Fatalf("config contexts: %q", got)
	}
	file := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "signagent", "config.yaml")
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the settings file: %v %v", fi, err)
	}
	if code, _, stderr := clitest.Run(t, "", "config", "set", "pin", "1234"); code != cmdutil.ExitBadInput || strings.Contains(stderr, "1234") {
		t.Fatalf("a secret in the settings file: exit %d, stderr %q", code, stderr)
	}
	if got := run("version"); !strings.HasPrefix(got, "signagent ") {
		t.Fatalf("version: %q", got)
	}
	if got := run("completion", "bash"); !strings.Contains(got, "signagent") {
		t.Fatalf("completion bash: %q", got)
	}
	if got := run("man"); !strings.Contains(got, ".TH") {
		t.Fatalf("man: %.80q", got)
	}
}
