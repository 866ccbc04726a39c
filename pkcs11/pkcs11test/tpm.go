package pkcs11test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/pkcs11/softhsm"
	"github.com/signagent/signagent/signer/signertest"
)

// TPMModules are where Debian's libtpm2-pkcs11-1 puts the module.
var TPMModules = []string{
	"/usr/lib/x86_64-linux-gnu/pkcs11/libtpm2_pkcs11.so",
	"/usr/lib/aarch64-linux-gnu/pkcs11/libtpm2_pkcs11.so",
}

// NewTPM gives the test a token of a second PKCS#11 implementation: a
// software TPM 2.0 (swtpm) behind the resource manager tpm2-abrmd on a
// private D-Bus session bus, with tpm2-pkcs11's store in the test's
// directory, an RSA-2048 and a P-256 key made by tpm2_ptool and self-signed
// certificates stored next to them through PKCS#11. Everything it starts is
// stopped when the test ends. `make test` installs the packages.
func NewTPM(t testing.TB) *Token {
	t.Helper()
	module := ""
	for _, p := range TPMModules {
		if _, err := os.Stat(p); err == nil {
			module = p
		}
	}
	if module == "" {
		t.Fatal("tpm2-pkcs11 is not installed; `make test` installs it (libtpm2-pkcs11-1)")
	}
	for _, tool := range []string{"swtpm", "tpm2-abrmd", "dbus-daemon", "tpm2_ptool"} {
		signertest.NeedTool(t, tool)
	}
	dir := t.TempDir()
	tk := &Token{Module: module, Dir: dir, Label: "signagent-tpm", PIN: "123456", SOPIN: "12345678"}
	for _, v := range tokenEnv {
		t.Setenv(v, "")
	}
	tk.RSA = KeyRef{Label: "rsa", ID: []byte("01")}
	tk.EC = KeyRef{Label: "ec", ID: []byte("02")}
	tk.PINFile = filepath.Join(dir, "pin")
	if err := os.WriteFile(tk.PINFile, []byte(tk.PIN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tk.Serial = "0000000000000000"
	// As SoftHSM's (copies.go): the TPM's state (its seeds and NV, where
	// tpm2-pkcs11's primary key is kept) and tpm2-pkcs11's store are made
	// once per test binary and copied into each later test's directory
	// before its TPM starts.
	shape := copyShape(t, Options{Label: "\x00tpm"})
	made := madeToken(shape)
	if made != nil {
		if err := made.copyTo(dir); err != nil {
			t.Fatalf("copy the test TPM: %v", err)
		}
		tk.RSA.Cert, tk.EC.Cert = made.rsa, made.ec
	}

	// The TPM, on two free loopback ports (commands and control), once it
	// takes connections: the resource manager opens the TPM once, as it
	// starts. The ports were free a moment before swtpm binds them; one
	// taken in between makes swtpm exit ("Address already in use"), and
	// it starts again on two others.
	state := filepath.Join(dir, tpmTokens, "state")
	os.MkdirAll(state, 0o700)
	port := startSWTPM(t, state)
	// A session bus of our own, and the resource manager on it: without
	// it the TPM runs out of object slots.
	bus := exec.Command("dbus-daemon", "--session", "--nofork", "--print-address=1")
	out, err := bus.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start(t, bus)
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon printed no address: %v", err)
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", strings.TrimSpace(addr))
	abrmd := exec.Command("tpm2-abrmd", "--session", "--allow-root", fmt.Sprintf("--tcti=swtpm:port=%d", port))
	start(t, abrmd)
	tcti := "tabrmd:bus_type=session"
	store := filepath.Join(dir, tpmTokens, "store")
	os.MkdirAll(store, 0o700)
	t.Setenv("TPM2_PKCS11_TCTI", tcti)
	t.Setenv("TPM2TOOLS_TCTI", tcti)
	t.Setenv("TPM2_PKCS11_STORE", store)
	t.Setenv("TPM2_PKCS11_LOG_LEVEL", "0")

	// The store, the token and its keys. The resource manager takes a
	// moment to claim its name on the bus: init is retried until it does.
	ptool := func(args ...string) error {
		b, err := exec.Command("tpm2_ptool", append(args, "--path="+store)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("tpm2_ptool %s: %v\n%s", args[0], err, b)
		}
		return nil
	}
	// A copy is ready once tpm2_ptool lists its token; a new TPM once
	// init has made the store. (Asking in this process before the
	// resource manager is on the bus leaves libtabrmd's cached bus
	// connection closed for the rest of the process.)
	first := func() error { return ptool("init") }
	if made != nil {
		first = func() error { return ptool("listtokens", "--pid=1") }
	}
	deadline := time.Now().Add(20 * time.Second)
	for err = first(); err != nil && time.Now().Before(deadline); err = first() {
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if made != nil {
		return tk
	}
	// tpm2_ptool takes the PINs on its command line; they are the test
	// token's fixed ones, nothing of an operator's.
	if err := ptool("addtoken", "--pid=1", "--sopin="+tk.SOPIN, "--userpin="+tk.PIN, "--label="+tk.Label); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		ref *KeyRef
		alg string
	}{{&tk.RSA, "rsa2048"}, {&tk.EC, "ecc256"}} {
		if err := ptool("addkey", "--algorithm="+k.alg, "--label="+tk.Label, "--userpin="+tk.PIN, "--key-label="+k.ref.Label, "--id="+string(k.ref.ID)); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range []*KeyRef{&tk.RSA, &tk.EC} {
		sel := tk.Selection(ref.Label)
		sel.NoCertificate = true
		k := openSel(t, sel)
		cert, err := softhsm.SelfSigned(k, "signagent test TPM "+ref.Label, time.Time{}, time.Time{})
		k.Close()
		if err != nil {
			t.Fatalf("certificate for the TPM key %q: %v", ref.Label, err)
		}
		if err := softhsm.ImportCertificate(tk.Module, tk.Label, tk.PIN, ref.ID, ref.Label, cert); err != nil {
			t.Fatal(err)
		}
		ref.Cert = cert
	}
	// Kept once swtpm has written its NV (each command that changes it is
	// written before the answer) and tpm2-pkcs11 its store.
	if err := keepTokenDir(shape, tk, tpmTokens); err != nil {
		t.Fatalf("keep the test TPM for copies: %v", err)
	}
	return tk
}

// tpmTokens is the directory under a TPM token's that holds what copies
// share: swtpm's state and tpm2-pkcs11's store.
const tpmTokens = "tpm"

// start starts cmd and stops it when the test ends.
func start(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
}

// startSWTPM starts swtpm on the TPM state in state and returns its command
// port (its control port is the next) once it takes connections.
func startSWTPM(t testing.TB, state string) int {
	t.Helper()
	for range 5 {
		port := freePortPair(t)
		err := swtpmOn(t, state, port)
		if errors.Is(err, errPortTaken) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return port
	}
	t.Fatal("swtpm found its ports taken five times")
	return 0
}

// errPortTaken is swtpm's port, or its control port, taken by another.
var errPortTaken = errors.New("swtpm's port is taken")

// swtpmOn starts swtpm on the TPM state in state, on port and port+1, and
// returns once it takes connections (killed at the test's end).
func swtpmOn(t testing.TB, state string, port int) error {
	cmd := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+state,
		"--server", fmt.Sprintf("type=tcp,port=%d,bindaddr=127.0.0.1", port),
		"--ctrl", fmt.Sprintf("type=tcp,port=%d,bindaddr=127.0.0.1", port+1),
		"--flags", "not-need-init,startup-clear")
	stderr := &LogBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start swtpm: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	gone := func() error {
		if strings.Contains(stderr.String(), "Address already in use") {
			return errPortTaken
		}
		return fmt.Errorf("swtpm exited: %s", stderr.String())
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case <-exited:
			return gone()
		default:
		}
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("swtpm does not take connections on port %d: %s", port, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What answered may be another's server on the port, with swtpm on
	// its way out. swtpm serves its control channel only once both its
	// ports are its own: its answer to CMD_GET_CAPABILITY is the proof (a
	// fixed wait for it to exit was too short on a loaded machine).
	for deadline := time.Now().Add(10 * time.Second); !swtpmAnswers(port + 1); {
		select {
		case <-exited:
			return gone()
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("swtpm does not answer on its control port %d: %s", port+1, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	return nil
}

// freePortPair returns a loopback port p with p+1 free too (at the moment).
func freePortPair(t testing.TB) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no two free loopback ports in a row")
	return 0
}

// swtpmAnswers says whether swtpm answers CMD_GET_CAPABILITY (1) on its
// control port.
func swtpmAnswers(ctrl int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ctrl), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte{0, 0, 0, 1}); err != nil {
		return false
	}
	var caps [8]byte
	_, err = io.ReadFull(c, caps[:])
	return err == nil
}
