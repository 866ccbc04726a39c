package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/internal/secret"
)

// secretEnv sets every secret variable (and its _FILE) to a value a test
// then looks for in a child's environment, with one variable that is no
// secret, kept.
func secretEnv() []string {
	var env []string
	for _, v := range secret.Vars {
		env = append(env, v+"=secret-of-"+v, v+"_FILE=/nonexistent/"+v)
	}
	return append(env, "SIGNAGENT_KEPT=not-a-secret")
}

// checkChildEnv fails when the recorded environment holds a secret
// variable or lacks the one that is none.
func checkChildEnv(t *testing.T, recorded string) {
	t.Helper()
	var kept bool
	for line := range strings.SplitSeq(recorded, "\n") {
		name, _, _ := strings.Cut(line, "=")
		if secret.IsVar(name) || strings.Contains(line, "secret-of-") {
			t.Errorf("the child got %s", line)
		}
		kept = kept || line == "SIGNAGENT_KEPT=not-a-secret"
	}
	if !kept {
		t.Errorf("the child lacks the variables that are no secret:\n%s", recorded)
	}
}

// waitFile waits (20 s at most) for the file a child writes whole (it
// renames it into place) and returns it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	waitFor(t, 20*time.Second, path+" to be written", func() bool { _, err := os.Stat(path); return err == nil })
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBrowserGetsNoSecrets: login --flow code starts $BROWSER (here a
// script that records its environment) without the client secret, the
// PIN or any other secret variable of signagent's environment.
func TestBrowserGetsNoSecrets(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	redirect := fmt.Sprintf("http://%s/callback", ln.Addr())
	ln.Close()
	emu := startEmulator(t, &emulator.Config{OIDC: emulator.OIDCConfig{Clients: []emulator.OIDCClient{{ID: "crm-app", Secret: "secret-of-" + secret.ClientSecretEnv,
		RedirectURIs: []string{redirect}}}}})
	dir := t.TempDir()
	rec := filepath.Join(dir, "env")
	browser := filepath.Join(dir, "browser")
	if err := os.WriteFile(browser, []byte("#!/bin/sh\nenv > "+rec+".part && mv "+rec+".part "+rec+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	env := append(secretEnv(), "XDG_STATE_HOME="+t.TempDir(), "SIGNAGENT_OIDC_URL="+emu.URL(), "SIGNAGENT_CLIENT_ID=crm-app",
		"SIGNAGENT_SPACE=staging", "BROWSER="+browser,
		// The client secret itself, as a user gives it.
		secret.ClientSecretEnv+"=secret-of-"+secret.ClientSecretEnv, secret.ClientSecretEnv+"_FILE=")
	cmd := signagent(t, env, "oidc", "login", "--flow", "code", "--redirect-uri", redirect, "--login-timeout", "60s")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	waitFor(t, 20*time.Second, "the browser to be started", func() bool {
		select {
		case <-exited:
			t.Fatalf("login ended before it started the browser: %s", stderr.String())
		default:
		}
		_, err := os.Stat(rec)
		return err == nil
	})
	recorded := waitFile(t, rec)
	if !strings.Contains(recorded, "\nBROWSER="+browser) && !strings.HasPrefix(recorded, "BROWSER=") {
		t.Fatalf("not the browser's environment (%s):\n%s", stderr.String(), recorded)
	}
	checkChildEnv(t, recorded)
}

// TestProbeGetsNoSecrets: the child that tries a PKCS#11 module before the
// command loads it (probe.Module) gets no secret variable. The module is
// a library whose constructor records the probe's environment (it has no
// C_GetFunctionList: the probe then says it is no module).
func TestProbeGetsNoSecrets(t *testing.T) {
	t.Parallel()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatal("gcc is needed to build the recording module (README: Go and gcc)")
	}
	dir := t.TempDir()
	rec := filepath.Join(dir, "env")
	src := filepath.Join(dir, "record.c")
	lib := filepath.Join(dir, "librecord.so")
	if err := os.WriteFile(src, []byte(`#include <stdio.h>
#include <stdlib.h>
extern char **environ;
/* In the probe's child only (the parent never loads a library that is no module). */
__attribute__((constructor)) static void record(void) {
	const char *out = getenv("RECORD_TO");
	if (!out || !getenv("SIGNAGENT_INTERNAL_PROBE_MODULE")) return;
	char part[4096];
	snprintf(part, sizeof part, "%s.part", out);
	FILE *f = fopen(part, "w");
	if (!f) return;
	for (char **e = environ; *e; e++) fprintf(f, "%s\n", *e);
	fclose(f);
	rename(part, out);
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := signagent(t, append(secretEnv(), "RECORD_TO="+rec), "token", "list", "--module", lib)
	code, stderr, _ := runBinary(t, cmd)
	if code == 0 || !strings.Contains(stderr, lib) {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	checkChildEnv(t, waitFile(t, rec))
}

// TestAgentKeptFromOtherProcesses: the agent, run as nobody, is not
// dumpable: its /proc directory belongs to root (the kernel gives a
// non-dumpable process's /proc files to root, so nobody's other processes
// cannot read its environment or memory), and its core size limit is 0.
// With SIGNAGENT_ALLOW_CORE_DUMPS=1 it stays nobody's, and its limit
// stays what it was given. Running as another user needs root; the
// secret package's TestKeepFromOtherProcesses covers the call itself.
func TestAgentKeptFromOtherProcesses(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to run an agent as another user (uid 65534); internal/secret's TestKeepFromOtherProcesses covers the call")
	}
	tk := procToken(t)
	for _, tc := range []struct {
		name     string
		env      []string
		owner    uint32
		coreSize string
	}{
		{"hardened", nil, 0, "0"},
		{secret.AllowCoreDumpsEnv, []string{secret.AllowCoreDumpsEnv + "=1"}, 65534, "unlimited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			sock := filepath.Join(dir, "a.sock")
			cmd := signagent(t, append(serveEnv(tk), tc.env...), "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull)
			asNobody(t, cmd, tk.Dir, dir)
			// Started with no core limit, as a shell of ulimit -c unlimited.
			cmd.Path, cmd.Args = "/bin/sh", append([]string{"sh", "-c", `ulimit -c unlimited && exec "$0" "$@"`, cmd.Path}, cmd.Args[1:]...)
			a := startServe(t, cmd, sock)
			if code, body := a.sign(); code != 200 {
				t.Fatalf("sign: %d %s %s", code, body, a.stderr.String())
			}
			pid := cmd.Process.Pid
			var st syscall.Stat_t
			if err := syscall.Stat(fmt.Sprintf("/proc/%d/environ", pid), &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != tc.owner {
				t.Errorf("/proc/%d/environ belongs to uid %d, want %d", pid, st.Uid, tc.owner)
			}
			if got := coreLimit(t, pid); got != tc.coreSize+" "+tc.coreSize {
				t.Errorf("core size limit %q, want %s", got, tc.coreSize)
			}
		})
	}
}

// coreLimit is "SOFT HARD" of the process's "Max core file size".
func coreLimit(t *testing.T, pid int) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Max core file size"); ok {
			f := strings.Fields(rest)
			if len(f) >= 2 {
				return f[0] + " " + f[1]
			}
		}
	}
	t.Fatalf("no core size in /proc/%d/limits", pid)
	return ""
}
