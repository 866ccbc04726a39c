package safefile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The agent's user in the container image and the chart (65532) and
// another one.
const (
	agentID = 65532
	otherID = 4242
)

// TestSecretModes: each mode, owner and group a secret file may have, for
// a store key (0o077 forbidden) and for a PIN (0o007), accepted or refused
// with the reason, for a process running as agentID:agentID.
func TestSecretModes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		perm      os.FileMode
		uid, gid  uint32
		forbidden os.FileMode
		want      string // "" accepted, else a part of the reason
	}{
		{"own key 0600", 0o600, agentID, agentID, 0o077, ""},
		{"own key 0400", 0o400, agentID, agentID, 0o077, ""},
		{"root's key 0400 (a Secret volume without fsGroup)", 0o400, 0, 0, 0o077, ""},
		{"root's key 0440, the agent's group (a Secret volume with fsGroup)", 0o440, 0, agentID, 0o077, ""},
		{"own key 0640, the agent's group: group read of root's files only", 0o640, agentID, agentID, 0o077, "mode 0640: a group-readable secret file must be owned by root; run chmod g-rwx /k"},
		{"root's key 0440, another group", 0o440, 0, otherID, 0o077, "not this process's own group (gid 65532); run chmod g-rwx /k"},
		{"root's key 0440, group root", 0o440, 0, 0, 0o077, "group 0, not this process's own group"},
		{"root's key 0460, group-writable", 0o460, 0, agentID, 0o077, "mode 0460: its group may write or execute it; run chmod g-wx /k"},
		{"root's key 0450, group-executable", 0o450, 0, agentID, 0o077, "mode 0450: its group may write or execute it; run chmod g-wx /k"},
		{"root's key 0444", 0o444, 0, agentID, 0o077, "mode 0444; run chmod o-rwx"},
		{"root's key 0404", 0o404, 0, 0, 0o077, "mode 0404; run chmod o-rwx /k"},
		{"own key 0602, others may write", 0o602, agentID, agentID, 0o077, "mode 0602"},
		{"another user's key 0400", 0o400, otherID, agentID, 0o077, "owned by uid 4242, neither root nor this process's user (uid 65532); run chown 65532"},
		{"another user's key 0440", 0o440, otherID, agentID, 0o077, "mode 0440: a group-readable secret file must be owned by root; run chmod g-rwx /k"},
		{"PIN 0600", 0o600, agentID, agentID, 0o007, ""},
		{"PIN of another user 0400", 0o400, otherID, otherID, 0o007, ""},
		{"root's PIN 0440 of another group (operators)", 0o440, 0, otherID, 0o007, ""},
		{"root's PIN 0640 of another group", 0o640, 0, otherID, 0o007, ""},
		{"PIN 0640 of another group", 0o640, agentID, otherID, 0o007, "mode 0640: a group-readable secret file must be owned by root; run chmod g-rwx /k"},
		{"PIN 0660", 0o660, agentID, agentID, 0o007, "mode 0660: its group may write or execute it; run chmod g-rwx /k"},
		{"PIN 0620, group write alone", 0o620, agentID, agentID, 0o007, "mode 0620: its group may write or execute it; run chmod g-rwx /k"},
		{"root's PIN 0660", 0o660, 0, otherID, 0o007, "mode 0660: its group may write or execute it; run chmod g-wx /k"},
		{"PIN 0644", 0o644, agentID, agentID, 0o007, "mode 0644; run chmod go-rwx /k"},
		{"PIN 0601", 0o601, 0, 0, 0o007, "mode 0601"},
	} {
		got := secretMode("/k", tc.perm, tc.uid, tc.gid, tc.forbidden, agentID, agentID)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// A process running as root's group has no group of its own to share
	// a key with: every process of gid 0 could read it.
	if got := secretMode("/k", 0o440, 0, 0, 0o077, 0, 0); !strings.Contains(got, "not this process's own group (gid 0)") {
		t.Errorf("root, 0440 root:root: %q", got)
	}
}

// TestSecretModesAsTheAgent reads real files as the agent's user (a child
// process of this test binary run as 65532:65532, with 4242 as a
// supplementary group, as the systemd unit's signagent-clients), as a
// Secret volume lays them out: root's files, group fsGroup.
// Root only: making files of other owners and dropping to another user
// needs it; CI runs as root.
func TestSecretModesAsTheAgent(t *testing.T) {
	if path := os.Getenv("SAFEFILE_READ_AS_AGENT"); path != "" {
		forbidden := os.FileMode(0o077)
		if os.Getenv("SAFEFILE_READ_AS_PIN") != "" {
			forbidden = 0o007
		}
		_, err := ReadSecret(path, 4096, forbidden)
		fmt.Printf("%v\n", err)
		return
	}
	if os.Getuid() != 0 {
		t.Skip("making files of other owners and running as another user needs root; CI runs as root")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // for the agent's user to reach
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "safefile.test")
	self, _ := os.Executable()
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		perm     os.FileMode
		uid, gid int
		link     bool // reached through a symlink, as ..data/key
		pin      bool // read as a PIN (0o007), not a store key
		want     string
	}{
		{"root:agent 0440 through a symlink (Secret volume, fsGroup)", 0o440, 0, agentID, true, false, "<nil>"},
		{"agent:agent 0600", 0o600, agentID, agentID, false, false, "<nil>"},
		{"agent:agent 0640", 0o640, agentID, agentID, false, false, "mode 0640: a group-readable secret file must be owned by root; run chmod g-rwx"},
		{"root:root 0400 (Secret volume without fsGroup)", 0o400, 0, 0, false, false, "permission denied"},
		{"root:agent 0460", 0o460, 0, agentID, false, false, "mode 0460: its group may write or execute it; run chmod g-wx"},
		{"root:agent 0444", 0o444, 0, agentID, true, false, "mode 0444; run chmod o-rwx"},
		{"root:clients 0440, clients a supplementary group", 0o440, 0, otherID, false, false, "group 4242, not this process's own group (gid 65532)"},
		{"other:agent 0440", 0o440, otherID, agentID, false, false, "a group-readable secret file must be owned by root"},
		{"PIN root:clients 0440", 0o440, 0, otherID, false, true, "<nil>"},
		{"PIN agent:agent 0640", 0o640, agentID, agentID, false, true, "mode 0640: a group-readable secret file must be owned by root; run chmod g-rwx"},
		{"PIN agent:agent 0620", 0o620, agentID, agentID, false, true, "mode 0620: its group may write or execute it; run chmod g-rwx"},
		{"PIN root:agent 0460", 0o460, 0, agentID, false, true, "mode 0460: its group may write or execute it; run chmod g-wx"},
	} {
		key := filepath.Join(dir, strings.NewReplacer(" ", "-", "(", "", ")", "", ",", "").Replace(tc.name))
		if err := os.WriteFile(key, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(key, tc.uid, tc.gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(key, tc.perm); err != nil {
			t.Fatal(err)
		}
		path := key
		if tc.link {
			path = key + ".link"
			if err := os.Symlink(filepath.Base(key), path); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(bin, "-test.run=^TestSecretModesAsTheAgent$")
		cmd.Env = append(os.Environ(), "SAFEFILE_READ_AS_AGENT="+path)
		if tc.pin {
			cmd.Env = append(cmd.Env, "SAFEFILE_READ_AS_PIN=1")
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: agentID, Gid: agentID, Groups: []uint32{otherID}}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", tc.name, err, out)
		}
		first, _, _ := strings.Cut(string(out), "\n")
		if !strings.Contains(first, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, first, tc.want)
		}
		if tc.want != "<nil>" && tc.want != "permission denied" && !strings.Contains(first, ErrSecretMode.Error()) {
			t.Errorf("%s: %q is not an ErrSecretMode", tc.name, first)
		}
	}
}
