package setupcmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
)

// TestSetupFamily runs setup without questions (--non-interactive) and
// without a token: a bad answer is refused with nothing written, good
// ones become a context of the settings file, made the current one.
func TestSetupFamily(t *testing.T) {
	clitest.Isolate(t)
	t.Setenv("SIGNAGENT_PKCS11_MODULE", "")
	file := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "signagent", "config.yaml")

	code, stdout, stderr := clitest.Run(t, "", "setup", "--context", "ci", "--non-interactive", "--space", "staging", "--api-key-file", "/nonexistent")
	if code != cmdutil.ExitBadInput || stdout != "" || !strings.Contains(stderr, "--api-key-file") {
		t.Fatalf("a missing key file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := os.Stat(file); err == nil {
		t.Fatal("setup wrote the settings file although an answer was bad")
	}

	code, stdout, stderr = clitest.Run(t, "", "setup", "--context", "ci", "--non-interactive", "--space", "staging", "--business-url", "https://api.example")
	if code != 0 || !strings.Contains(stdout+stderr, "Context ci written") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(b), "current-context: ci") || !strings.Contains(string(b), "business-url: https://api.example") {
		t.Fatalf("the settings file: %q %v", b, err)
	}
}
