package agentcmd_test

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
)

// TestAgentFamily drives the agent's commands that need no token: store-key
// makes a key file closed to others, agent status names an agent that is
// not there with the unreachable status, and serve with nothing to serve
// says what to give, in one line, before it listens.
func TestAgentFamily(t *testing.T) {
	clitest.Isolate(t)
	t.Run("store-key", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "store.key")
		code, stdout, stderr := clitest.Run(t, "", "store-key", "--out", out)
		if code != 0 {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		fi, err := os.Stat(out)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the key file: %v %v", fi, err)
		}
		b, _ := os.ReadFile(out)
		if k, err := hex.DecodeString(strings.TrimSpace(string(b))); err != nil || len(k) != 32 {
			t.Fatalf("the key file holds %q, want 64 hex characters", b)
		}
		if code, _, _ := clitest.Run(t, "", "store-key", "--out", out); code != cmdutil.ExitBadInput {
			t.Fatalf("over an existing key file: exit %d, want %d", code, cmdutil.ExitBadInput)
		}
	})
	t.Run("agent status, no agent", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "agent.sock")
		code, _, stderr := clitest.Run(t, "", "agent", "status", "--agent-sock", sock)
		if code != cmdutil.ExitTransport || !strings.Contains(stderr, sock) {
			t.Fatalf("exit %d (want %d), stderr %q", code, cmdutil.ExitTransport, stderr)
		}
	})
	t.Run("serve, nothing to serve", func(t *testing.T) {
		t.Setenv("SIGNAGENT_API_KEY", "")
		t.Setenv("SIGNAGENT_PKCS11_MODULE", "")
		sock := filepath.Join(t.TempDir(), "agent.sock")
		code, stdout, stderr := clitest.Run(t, "", "serve", "--listen", "unix:"+sock)
		if code != cmdutil.ExitBadInput || stdout != "" || !strings.Contains(stderr, "nothing to serve") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if _, err := os.Stat(sock); err == nil {
			t.Fatal("the agent listened although it refused its settings")
		}
	})
}
