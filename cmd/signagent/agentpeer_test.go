package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
)

// TestAgentOfAnotherUserRefused: an agent socket served by another user's
// agent (here nobody's) gets nothing from the CLI, whichever way it is
// named and whatever --agent says: one line naming the socket and the
// user, exit 2 (the socket setting is wrong), and no doing it here
// instead. Running an agent as another user needs root.
func TestAgentOfAnotherUserRefused(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to run an agent as another user (uid 65534); agentclient's TestCheckPeer covers the decision")
	}
	tk := procToken(t)
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	cmd := signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull)
	asNobody(t, cmd, tk.Dir, dir)
	startServe(t, cmd, sock)

	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("agent-sock: "+sock+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	session := []string{"trusted", "session", "--snils", "11223344595", "--service-user-id", "crm-42"}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"SIGNAGENT_AGENT_SOCK", []string{"SIGNAGENT_AGENT_SOCK=" + sock}, session},
		{"--agent auto", []string{"SIGNAGENT_AGENT_SOCK=" + sock}, append(session, "--agent", "auto")},
		{"the settings file (auto)", []string{"SIGNAGENT_CONFIG=" + cfg}, session},
		{"api", []string{"SIGNAGENT_AGENT_SOCK=" + sock}, []string{"api", "--scheme", "trusted", "--snils", "11223344595", "--service-user-id", "crm-42", "/GetMyOrganizations"}},
		{"agent status", []string{"SIGNAGENT_AGENT_SOCK=" + sock}, []string{"agent", "status"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := signagent(t, nil, tc.args...)
			// Only what the case names the socket with (an empty
			// variable would beat the settings file).
			cmd.Env = append(slices.DeleteFunc(cmd.Env, func(e string) bool { return strings.HasPrefix(e, "SIGNAGENT_AGENT_SOCK=") }),
				append(serveEnv(tk), tc.env...)...)
			code, stderr, _ := runBinary(t, cmd)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			want := "refusing the agent socket " + sock + ": the process listening on it runs as uid 65534"
			if code != cmdutil.ExitBadInput || len(lines) != 1 || !strings.HasPrefix(lines[0], "signagent: ") || !strings.Contains(lines[0], want) {
				t.Fatalf("exit %d, want %d and one line with %q: %s", code, cmdutil.ExitBadInput, want, stderr)
			}
			t.Log(lines[0])
		})
	}
}
