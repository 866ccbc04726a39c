package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
)

// TestDoctorAgentFilesAsServe: doctor --agent-config judges the agent's
// own files by the rules serve applies when it starts, because it calls
// the same functions: the bearer token file and the TLS key of root, mode
// 0440, readable by a group (a Kubernetes Secret volume, install -o root
// -m 0440) pass both; a file of another user, mode 0640, is refused by
// both with the same line; an empty legacy password file is refused by
// both with the same line. serve is the real binary, on the emulator's
// legacy API (no token needed).
func TestDoctorAgentFilesAsServe(t *testing.T) {
	r := newDoctorRig(t)
	const otherUser = 4242
	// files writes the agent's files of owner uid, group gid and mode
	// perm, and the agent's settings naming them.
	files := func(t *testing.T, uid, gid int, perm os.FileMode, password string) (cfg string) {
		dir := t.TempDir()
		bearer := writeSecret(t, dir, "bearer", "0123456789abcdef0123456789abcdef")
		cert, key, _ := selfSigned(t, dir)
		for _, f := range []string{bearer, key} {
			if os.Getuid() == 0 { // else the test's user owns it: the same refusal
				if err := os.Chown(f, uid, gid); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(f, perm); err != nil {
				t.Fatal(err)
			}
		}
		pw := filepath.Join(dir, "password")
		if err := os.WriteFile(pw, []byte(password), 0o600); err != nil {
			t.Fatal(err)
		}
		return writeSecret(t, dir, "agent.yaml", strings.Join([]string{
			"bearer-token-file: " + bearer, "tls-cert: " + cert, "tls-key: " + key, `audit-log: "-"`,
			"business-url: " + r.emu.URL(), "developer-key-file: " + writeSecret(t, dir, "developer-key", doctorDevKey),
			"legacy-password-file: [crm=" + pw + "]"}, "\n"))
	}
	serve := func(cfg, sock string) []string {
		return []string{"serve", "--config", cfg, "--listen", "unix:" + sock, "--listen", "tcp:127.0.0.1:0"}
	}
	env := []string{"SIGNAGENT_API_KEY="}

	t.Run("root's files 0440 of a group", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("making files of root needs root; CI runs as root")
		}
		cfg := files(t, 0, otherUser, 0o440, "password-of-crm\n")
		_, checks, _ := r.doctor(t, "--agent-config", cfg)
		want(t, checks, "bearer-token-file", "ok", `bearer holds a bearer token and is closed to others$`)
		// selfSigned's certificate is valid for an hour.
		want(t, checks, "tls-cert", "warn", `tls\.pem expires on `)
		want(t, checks, "legacy-password-file crm", "ok", `^read from the file .*password \(--legacy-password-file\)$`)
		sock := filepath.Join(t.TempDir(), "agent.sock")
		startServe(t, signagent(t, env, serve(cfg, sock)...), sock).tcpAddr(t)
	})

	t.Run("another user's files 0640", func(t *testing.T) {
		cfg := files(t, otherUser, otherUser, 0o640, "")
		code, checks, _ := r.doctor(t, "--agent-config", cfg)
		if code != cmdutil.ExitFailure {
			t.Fatalf("exit %d", code)
		}
		want(t, checks, "legacy-password-file crm", "fail", `^the password of crm: the file .*password \(--legacy-password-file\) is empty$`)
		want(t, checks, "bearer-token-file", "fail", `bearer has mode 0640: a group-readable secret file must be owned by root; run chmod g-rwx `)
		want(t, checks, "tls-key", "fail", `^the TLS key: .*tls\.key has mode 0640: a group-readable secret file must be owned by root; run chmod g-rwx `)
		// serve refuses each with doctor's line; it reads the password
		// first, then the TLS key, then the bearer token, so each is made
		// right in turn.
		for _, name := range []string{"legacy-password-file crm", "tls-key", "bearer-token-file"} {
			sock := filepath.Join(t.TempDir(), "agent.sock")
			code, stderr, _ := runBinary(t, signagent(t, env, serve(cfg, sock)...))
			if code != cmdutil.ExitBadInput || !strings.Contains(stderr, "signagent: "+checks[name].Detail) {
				t.Fatalf("serve: exit %d, stderr %q; want doctor's %s line %q", code, stderr, name, checks[name].Detail)
			}
			switch name {
			case "legacy-password-file crm":
				settings, _ := os.ReadFile(cfg)
				pw := regexp.MustCompile(`crm=(.*)\]`).FindSubmatch(settings)[1]
				os.WriteFile(string(pw), []byte("password-of-crm\n"), 0o600)
			case "tls-key":
				os.Chmod(filepath.Join(filepath.Dir(cfg), "tls.key"), 0o600)
			}
		}
	})
}
