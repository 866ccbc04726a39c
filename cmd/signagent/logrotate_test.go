package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLogrotateAsTheAgent: the package's logrotate snippet rotates the
// audit log as the agent's user (su signagent signagent, the user and
// group of packaging/sysusers.conf), creating the new log as that user's
// 0600. Then real logrotate runs the snippet (the user and the directory
// made nobody's) and the rotated log and the new one are nobody's.
func TestLogrotateAsTheAgent(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "packaging", "logrotate"))
	if err != nil {
		t.Fatal(err)
	}
	snippet := string(b)
	var su, create bool
	for line := range strings.SplitSeq(snippet, "\n") {
		f := strings.Fields(line)
		su = su || strings.Join(f, " ") == "su signagent signagent"
		create = create || strings.Join(f, " ") == "create 0600 signagent signagent"
	}
	if !su || !create {
		t.Fatalf("packaging/logrotate does not rotate as the agent's user (su signagent signagent: %v) and create its log 0600 (%v):\n%s", su, create, snippet)
	}
	if os.Getuid() != 0 {
		t.Skip("logrotate as another user needs root; the snippet's lines were checked")
	}
	bin, err := exec.LookPath("logrotate")
	if err != nil {
		t.Fatal("logrotate is not installed: make test installs it (scripts/deps.sh logrotate)")
	}
	const nobody = 65534
	dir := shortDir(t)
	state := filepath.Join(dir, "state")
	logs := filepath.Join(dir, "lib")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	audit := filepath.Join(logs, "audit.log")
	if err := os.WriteFile(audit, []byte("{\"event\":\"sign\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{logs, audit} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	conf := strings.NewReplacer("/var/lib/signagent/audit.log", audit, "signagent signagent", "nobody nogroup",
		"systemctl kill", "true systemctl kill").Replace(snippet)
	confFile := filepath.Join(dir, "signagent")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "--force", "--state", state, confFile).CombinedOutput(); err != nil {
		t.Fatalf("logrotate: %v\n%s", err, out)
	}
	for name, mode := range map[string]os.FileMode{"audit.log.1": 0o600, "audit.log": 0o600} {
		st, err := os.Stat(filepath.Join(logs, name))
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if sys.Uid != nobody || sys.Gid != nobody || st.Mode().Perm() != mode {
			t.Errorf("%s: %d:%d %04o, want %d:%d %04o", name, sys.Uid, sys.Gid, st.Mode().Perm(), nobody, nobody, mode)
		}
	}
}
