package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// TestShippedBinaryHoldsNoEmulator: the signagent that is shipped holds no
// test rig (no package named *test),
// no package of the emulator, nor the benchmark that starts one in its
// process: they are signagent-emulator's and signagent-bench's. (`go
// version -m bin/signagent` lists modules, and the emulator is in this
// module: the packages are what the go command builds the binary from.)
func TestShippedBinaryHoldsNoEmulator(t *testing.T) {
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the binary's packages: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/signagent/signagent"
	pkgs := strings.Fields(string(out))
	var found bool
	for _, p := range pkgs {
		rel, ours := strings.CutPrefix(p, module+"/")
		found = found || p == module+"/cmd/signagent"
		if !ours {
			continue
		}
		if strings.HasSuffix(path.Base(rel), "test") {
			t.Errorf("signagent holds the test rig %s", p)
		}
		for _, not := range []string{"emulator", "bench", "cmd/internal/emulatorcmd", "cmd/internal/benchcmd"} {
			if rel == not || strings.HasPrefix(rel, not+"/") {
				t.Errorf("signagent holds %s", p)
			}
		}
	}
	if !found || len(pkgs) < 20 {
		t.Fatalf("go list -deps named %d packages, not signagent's: %q", len(pkgs), out)
	}
}

// TestDepsRemovesSystemVpcd: scripts/deps.sh (make deps) removes the
// reader entry vsmartcard-vpcd installs for the system's pcscd, and no
// other, here under a scratch root ($DEPS_ROOT).
func TestDepsRemovesSystemVpcd(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	conf := filepath.Join(root, "etc", "reader.conf.d")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"vpcd", "libccidtwin"} {
		if err := os.WriteFile(filepath.Join(conf, f), []byte("LIBPATH /usr/lib/pcsc/drivers/serial/lib"+f+".so\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "deps.sh"))
	cmd.Env = append(os.Environ(), "DEPS_ROOT="+root)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deps.sh: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(conf, "vpcd")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the system's vpcd reader entry is still there (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(conf, "libccidtwin")); err != nil {
		t.Errorf("another reader's entry went too: %v", err)
	}
}

// TestNoSystemVpcdReader: after make deps, the system's pcscd has no vpcd
// reader (no entry of /etc/reader.conf.d loads its driver), and nothing
// listens on vpcd's ports in this network namespace: the card rig's vpcd
// listens in a namespace of its own.
func TestNoSystemVpcdReader(t *testing.T) {
	t.Parallel()
	entries, _ := os.ReadDir("/etc/reader.conf.d")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/etc/reader.conf.d", e.Name()))
		if err == nil && strings.Contains(string(b), "libifdvpcd") {
			t.Errorf("/etc/reader.conf.d/%s loads vpcd for the system's pcscd (vpcd listens on every interface): make deps removes it", e.Name())
		}
	}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue // no IPv6
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			f := strings.Fields(line)
			// local_address is ADDR:PORT in hex; state 0A is LISTEN.
			if len(f) > 3 && f[3] == "0A" && (strings.HasSuffix(f[1], ":8C7B") || strings.HasSuffix(f[1], ":8C7C")) {
				t.Errorf("%s: something listens on vpcd's port here: %s", table, line)
			}
		}
	}
}
