package pkcs11test

// The card rig's plumbing: its processes, stopped by their PIDs; the
// bridge built from source; the NSS database the card reads; the tools it
// needs.

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitOwnNetns waits until p has left this process's network namespace:
// unshare(1) runs before it makes the namespace, and nsenter would enter
// the host's in the meantime (pcscd would then listen on the host).
func waitOwnNetns(t testing.TB, p *rigProc) {
	t.Helper()
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", p.cmd.Process.Pid))
		if err == nil && ns != self {
			return
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("card rig: unshare -n made no network namespace (%v):\n%s", err, tail(p.log, 10))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rigProc is a process of the rig, stopped by its PID when the test ends.
type rigProc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startRig starts name, its output appended to DIR/NAME.log; the card's
// cleanup stops it. nsenter, unshare and sh -c "... exec" replace
// themselves with the program, so the PID is the program's.
func startRig(t testing.TB, dir, name, prog string, args ...string) *rigProc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(prog, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		t.Fatalf("card rig: start %s: %v", name, err)
	}
	p := &rigProc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	return p
}

func (p *rigProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends TERM, then KILL after 5 s, and waits for the process.
func (p *rigProc) stop() {
	if p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// stableSocket points a path that stays the same for this process at
// target, and returns it. libpcsclite reads CardSocketEnv once per load
// (pthread_once), so a second rig in the same test process would otherwise
// be looked for at the first one's socket while OpenSC stays loaded. The
// short path also keeps clear of sun_path's 108 bytes.
func stableSocket(t testing.TB, target string) string {
	t.Helper()
	link := filepath.Join(os.TempDir(), fmt.Sprintf("signagent-pcscd-%d.comm", os.Getpid()))
	tmp := link + ".new"
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if got, _ := os.Readlink(link); got == target {
			os.Remove(link)
		}
	})
	return link
}

// buildBridge compiles vcard/vcard.c against libcacard into dir.
func buildBridge(t testing.TB, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "vcard.c")
	if err := os.WriteFile(src, []byte(vcardSource), 0o600); err != nil {
		t.Fatal(err)
	}
	flags, err := exec.Command("pkg-config", "--cflags", "--libs", "libcacard").Output()
	if err != nil {
		t.Fatalf("libcacard's development files are not installed; `make test` installs them (scripts/deps.sh libcacard-dev pkg-config): %v", err)
	}
	bin := filepath.Join(dir, "vcard")
	args := append([]string{"-O2", "-Wall", "-o", bin, src}, strings.Fields(string(flags))...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("card rig: build the bridge: %v\n%s", err, out)
	}
	return bin
}

// cardDatabase makes the card's NSS database in db, its password pin, with
// three self-signed RSA-2048 certificates and their keys, and returns the
// certificates.
func cardDatabase(t testing.TB, db, pin string) []*x509.Certificate {
	t.Helper()
	dir := filepath.Dir(db)
	pinf, noise := filepath.Join(dir, "dbpin"), filepath.Join(dir, "noise")
	if err := os.WriteFile(pinf, []byte(pin), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(pinf)
	if err := os.WriteFile(noise, []byte(strconv.FormatInt(time.Now().UnixNano(), 16)+dir), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(noise)
	certutil := func(args ...string) []byte {
		cmd := exec.Command("certutil", append(args, "-d", "sql:"+db)...)
		// NSS protects the key database with PBKDF2 at 10000 iterations:
		// certutil then took over a second a key here, a password change
		// four. Test keys need no such protection.
		cmd.Env = append(os.Environ(), "NSS_MAX_MP_PBE_ITERATION_COUNT=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("card rig: certutil %s: %v: %s", args[0], err, out)
		}
		return out
	}
	certutil("-N", "-f", pinf)
	var certs []*x509.Certificate
	for i := 1; i <= 3; i++ {
		nick := fmt.Sprintf("cert%d", i)
		certutil("-S", "-f", pinf, "-z", noise, "-n", nick, "-s", fmt.Sprintf("CN=vcard rig %d,O=signagent test", i),
			"-x", "-t", "CT,C,C", "-k", "rsa", "-g", "2048", "-Z", "SHA256", "-v", "24",
			"--keyUsage", "digitalSignature,nonRepudiation,keyEncipherment,dataEncipherment")
		var der []byte
		if blk, _ := pem.Decode(certutil("-L", "-n", nick, "-a")); blk != nil {
			der = blk.Bytes
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatalf("card rig: certutil -L -a printed no certificate for %s: %v", nick, err)
		}
		certs = append(certs, cert)
	}
	return certs
}

func openSCModule(t testing.TB) string {
	t.Helper()
	for _, p := range OpenSCModules {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("OpenSC's PKCS#11 module is not installed; `make test` installs it (scripts/deps.sh opensc)")
	return ""
}

// The tools the card rig needs (and the packages that have them), besides
// the card's own.
var (
	rigTools = []struct{ name, pkg string }{
		{"pcscd", "pcscd"}, {"pkcs11-tool", "opensc"}, {"unshare", "util-linux"}, {"nsenter", "util-linux"}, {"ip", "iproute2"},
	}
	cacTools = []struct{ name, pkg string }{{"certutil", "libnss3-tools"}, {"gcc", "gcc"}, {"pkg-config", "pkg-config"}}
)

// needCardTools fails the test when the rig cannot be made here.
func needCardTools(t testing.TB, cardTools []struct{ name, pkg string }) {
	t.Helper()
	for _, tool := range append(slices.Clone(rigTools), cardTools...) {
		if _, err := exec.LookPath(tool.name); err != nil {
			t.Fatalf("%s is not installed: the card rig needs it; `make test` installs it (scripts/deps.sh %s)", tool.name, tool.pkg)
		}
	}
	if _, err := os.Stat(vpcdDriver); err != nil {
		t.Fatal("vsmartcard's vpcd reader driver is not installed; `make test` installs it (scripts/deps.sh vsmartcard-vpcd)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the card rig needs root: it runs pcscd in network and mount namespaces of its own (CI and `make test` run as root)")
	}
}

// tail returns the last n lines of a file, for a failing test's log.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
