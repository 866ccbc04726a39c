package pkcs11test

import (
	"bufio"
	"context"
	"crypto/x509"
	_ "embed"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// The card rig: a smart card behind the stack a real card goes through,
// without hardware (see ../shared/spec/smartcard-stack.md). Debian's pcscd
// loads vsmartcard's vpcd reader driver; the bridge of vcard/vcard.c
// (built here with gcc) connects to vpcd as the card and answers with the
// CAC card libcacard emulates over an NSS database; OpenSC's
// opensc-pkcs11.so reaches it through pcscd as it would a card in a USB
// reader. pcscd and the bridge run in a network namespace of their own
// (vpcd listens on every interface), and pcscd in a mount namespace of its
// own where the rig's directory is /run, so that its socket is the rig's:
// a system pcscd is never touched. Every process is stopped by its PID.

//go:embed vcard/vcard.c
var vcardSource string

// CardSocketEnv is the variable through which libpcsclite (loaded by
// OpenSC) finds pcscd's socket.
const CardSocketEnv = "PCSCLITE_CSOCK_NAME"

// Where Debian puts OpenSC's module and vpcd's driver.
var (
	OpenSCModules = []string{
		"/usr/lib/x86_64-linux-gnu/opensc-pkcs11.so",
		"/usr/lib/aarch64-linux-gnu/opensc-pkcs11.so",
	}
	vpcdDriver = "/usr/lib/pcsc/drivers/serial/libifdvpcd.so"
)

// What OpenSC shows of the card (libcacard's CAC over the rig's database).
const (
	// CardKeyLabel labels the first key pair and certificate, ID 0001.
	CardKeyLabel = "CAC ID Certificate"
	// CardSerial is the serial number OpenSC gives every libcacard card:
	// two rig cards cannot be told apart by it, only by their slots.
	CardSerial = "000058bd002c19b5"
	// cardPort is vpcd's first reader's port: each rig has a network
	// namespace, so every rig uses the default. Debian's vpcd makes two
	// readers, "Virtual PCD 00 00" on cardPort and "Virtual PCD 00 01" on
	// cardPort+1.
	cardPort = 35963
	// CardReaders is the count of readers in a rig (0 and 1).
	CardReaders = 2
)

// CardKeyID is the ID of the first key pair and certificate.
var CardKeyID = []byte{0x00, 0x01}

// CardOptions shape a rig card.
type CardOptions struct {
	// PIN is the card's PIN, 4 to 8 characters (default "123456").
	PIN string
	// Tries is the count of wrong PINs after which the PIN blocks (3).
	Tries int
	// Delay is waited before every answer to an APDU (a card's speed).
	Delay time.Duration
	// SignDelay is waited, besides Delay, before the answer to a
	// signature or decryption.
	SignDelay time.Duration
	// LibcacardWords passes libcacard's own status words through instead
	// of a real card's (no PIN counter; 6985 for a wrong PIN).
	LibcacardWords bool
	// LogAPDUs logs every APDU's header and status word in the bridge's log.
	LogAPDUs bool
	// ForProcesses leaves the test's environment alone: the card is for
	// the processes the test starts, each given c.Env, so the test may run
	// in parallel with others (t.Setenv forbids t.Parallel). Without it
	// CardSocketEnv names the rig's pcscd for the test's own process, as
	// the in-process tests need.
	ForProcesses bool
}

// Card is a running rig: a card in a reader behind its own pcscd.
type Card struct {
	Dir     string // the rig's directory (short: Unix socket paths)
	Module  string // OpenSC's PKCS#11 module
	Socket  string // pcscd's socket as clients name it (CardSocketEnv)
	Env     []string
	PIN     string
	PINFile string // a 0600 file holding PIN
	Label   string // the token label: the first certificate's common name
	Serial  string
	KeyID   []byte
	// KeyLabel labels the first key pair and its certificate.
	KeyLabel string
	// Cert is the first certificate; Certs all three, in the card's order.
	Cert  *x509.Certificate
	Certs []*x509.Certificate

	rig    *cardRig
	bridge *rigProc // guarded by rig.mu
	name   string   // the bridge's name: its log and control socket
	reader int      // the reader the card starts in
	opts   CardOptions
	gost   *gostCard // the GOST card's own (nil: the CAC card)
}

// cardRig is what the cards of a rig share: its network namespace and its
// pcscd.
type cardRig struct {
	mu    sync.Mutex
	netns *rigProc // holds the network namespace
	pcscd *rigProc // nil while stopped
}

// NewCard starts a rig and waits (at most 20 s) until OpenSC sees the card.
// Unless o.ForProcesses, it sets CardSocketEnv for the test (so the module
// loaded in this process finds the rig's pcscd), which is why tests using
// it that way cannot be parallel.
// Everything it starts is stopped when the test ends. It needs root (for
// the namespaces) and the packages `make test` installs.
func NewCard(t testing.TB, o CardOptions) *Card {
	t.Helper()
	start := time.Now()
	if o.PIN == "" {
		o.PIN = "123456"
	}
	if o.Tries == 0 {
		o.Tries = 3
	}
	if len(o.PIN) < 4 || len(o.PIN) > 8 {
		t.Fatalf("a rig card's PIN is 4 to 8 characters (OpenSC's CAC driver refuses others)")
	}
	c := &Card{Module: openSCModule(t), PIN: o.PIN, Serial: CardSerial, KeyID: CardKeyID, KeyLabel: CardKeyLabel,
		rig: &cardRig{}, name: "bridge", opts: o}
	needCardTools(t, cacTools)
	c.startRig(t)
	c.Certs = cardDatabase(t, filepath.Join(c.Dir, "db"), c.PIN)
	c.Cert = c.Certs[0]
	c.Label = c.Cert.Subject.CommonName
	buildBridge(t, c.Dir)
	c.startBridge(t)
	c.waitListed(t, 1, 20*time.Second)
	t.Logf("card rig up in %v (%s)", time.Since(start).Round(time.Millisecond), c.Dir)
	return c
}

// startRig makes the rig's directory (with c.PIN's file) and starts its
// network namespace and its pcscd, the card's reader; the card is the
// caller's to start. Everything is stopped when the test ends.
func (c *Card) startRig(t testing.TB) {
	t.Helper()
	if !c.opts.ForProcesses {
		clearTokenEnv(t)
	}
	dir, err := os.MkdirTemp("", "vcard")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // runs after the processes are stopped
	c.Dir = dir
	for _, d := range []string{"run/pcscd", "conf", "db"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	c.PINFile = filepath.Join(dir, "pin")
	if err := os.WriteFile(c.PINFile, []byte(c.PIN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("FRIENDLYNAME \"Virtual PCD\"\nDEVICENAME /dev/null:%d\nLIBPATH %s\nCHANNELID %d\n", cardPort, vpcdDriver, cardPort)
	if err := os.WriteFile(filepath.Join(dir, "conf", "vpcd"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Socket = filepath.Join(dir, "run", "pcscd", "pcscd.comm")
	if !c.opts.ForProcesses {
		// One path for every rig of this process (stableSocket says why);
		// processes each load libpcsclite afresh and are given the rig's own.
		c.Socket = stableSocket(t, c.Socket)
	}
	c.Env = []string{CardSocketEnv + "=" + c.Socket}
	if c.opts.ForProcesses {
		// What the caller's environment would choose instead, emptied.
		for _, v := range tokenEnv {
			c.Env = append(c.Env, v+"=")
		}
	} else {
		t.Setenv(CardSocketEnv, c.Socket)
	}

	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range []string{"pcscd.log", "bridge.log"} {
				t.Logf("the card rig's %s:\n%s", l, tail(filepath.Join(dir, l), 40))
			}
		}
	})
	// The processes live as long as the test that made the card (not the
	// subtest that restarted pcscd): stopped first, then the logs shown,
	// then the directory removed.
	t.Cleanup(c.stop)
	// The network namespace, held by a process of its own so that pcscd
	// can be stopped and started in it.
	c.rig.mu.Lock()
	c.rig.netns = startRig(t, dir, "netns", "unshare", "-n", "sleep", "infinity")
	c.rig.mu.Unlock()
	waitOwnNetns(t, c.rig.netns)
	if out, err := exec.Command("nsenter", "-t", c.pid(c.rig.netns), "-n", "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("card rig: bring up loopback in its network namespace: %v: %s", err, out)
	}
	c.StartPCSCD(t)
}

// AddCard puts a second card into reader 1 of c's rig, made from c's NSS
// database: the same label, serial, keys and PIN (libcacard gives every
// card the same serial), so that only the slot tells the two apart, as
// with two cards of one batch. Its PIN count and delays are its own; it
// starts with c's options. It waits (at most 20 s) until OpenSC lists both.
func (c *Card) AddCard(t testing.TB) *Card {
	t.Helper()
	if c.reader != 0 || c.name != "bridge" {
		t.Fatal("card rig: add the second card to the first")
	}
	two := *c
	two.Certs = slices.Clone(c.Certs)
	two.bridge, two.name, two.reader = nil, "bridge2", 1
	two.startBridge(t)
	t.Cleanup(func() {
		two.rig.mu.Lock()
		p := two.bridge
		two.rig.mu.Unlock()
		p.stop()
		if t.Failed() {
			t.Logf("the card rig's bridge2.log:\n%s", tail(filepath.Join(c.Dir, "bridge2.log"), 40))
		}
	})
	two.waitListed(t, 2, 20*time.Second)
	return &two
}

// startBridge starts the card's bridge (built in the rig's directory), or
// the GOST card's process.
func (c *Card) startBridge(t testing.TB) {
	t.Helper()
	if c.gost != nil {
		c.startGOSTCard(t)
		return
	}
	o := c.opts
	args := []string{"-t", c.pid(c.rig.netns), "-n", filepath.Join(c.Dir, "vcard"), "-D", filepath.Join(c.Dir, "db"),
		"-p", strconv.Itoa(cardPort), "-r", strconv.Itoa(c.reader), "-c", c.control(), "-T", strconv.Itoa(o.Tries),
		"-d", strconv.Itoa(int(o.Delay / time.Millisecond)), "-s", strconv.Itoa(int(o.SignDelay / time.Millisecond))}
	if o.LibcacardWords {
		args = append(args, "-R")
	}
	if o.LogAPDUs {
		args = append(args, "-v")
	}
	args = append(args, "cert1", "cert2", "cert3")
	p := startRig(t, c.Dir, c.name, "nsenter", args...)
	c.rig.mu.Lock()
	c.bridge = p
	c.rig.mu.Unlock()
}

// Selection selects the card's first key with its PIN file.
func (c *Card) Selection() pkcs11.Selection {
	return pkcs11.Selection{Module: c.Module, Token: tokeninfo.TokenSelector{Label: c.Label},
		KeyLabel: c.KeyLabel, KeyID: c.KeyID, PIN: pkcs11.PINSource{File: c.PINFile}}
}

// Remove takes the card out of the reader: the bridge powers it off and
// closes its connection to vpcd. pcscd sees it at its next poll.
func (c *Card) Remove(t testing.TB) {
	t.Helper()
	c.command(t, "remove")
}

// Insert puts the card back into the reader it was in: the bridge
// connects to vpcd again (or keeps trying while pcscd is stopped).
func (c *Card) Insert(t testing.TB) {
	t.Helper()
	c.command(t, "insert")
}

// InsertInto puts the card into reader (0 or 1, "Virtual PCD 00 00" or
// "00 01"), taking it out of the other one first if it is there: OpenSC
// then shows the token in another slot.
func (c *Card) InsertInto(t testing.TB, reader int) {
	t.Helper()
	if reader < 0 || reader >= CardReaders {
		t.Fatalf("card rig: reader %d: the rig has readers 0 and 1", reader)
	}
	c.command(t, "insert "+strconv.Itoa(reader))
}

// SetDelay sets the wait before every answer to an APDU.
func (c *Card) SetDelay(t testing.TB, d time.Duration) {
	t.Helper()
	c.command(t, "delay "+strconv.Itoa(int(d/time.Millisecond)))
}

// SetSignDelay sets the extra wait before the answer to a signature or a
// decryption.
func (c *Card) SetSignDelay(t testing.TB, d time.Duration) {
	t.Helper()
	c.command(t, "signdelay "+strconv.Itoa(int(d/time.Millisecond)))
}

// TriesLeft is the count of PIN tries the card has left (0: blocked).
func (c *Card) TriesLeft(t testing.TB) int {
	t.Helper()
	n, err := strconv.Atoi(c.command(t, "tries"))
	if err != nil {
		t.Fatalf("card rig: tries: %v", err)
	}
	return n
}

// BridgeLog is what the bridge logged so far (with LogAPDUs, every APDU's
// header and status word; never a PIN).
func (c *Card) BridgeLog(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Dir, c.name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// StopPCSCD stops the rig's pcscd (TERM, then KILL after 5 s).
func (c *Card) StopPCSCD(t testing.TB) {
	t.Helper()
	c.rig.mu.Lock()
	p := c.rig.pcscd
	c.rig.pcscd = nil
	c.rig.mu.Unlock()
	if p == nil {
		t.Fatal("card rig: pcscd is not running")
	}
	p.stop()
}

// StartPCSCD starts the rig's pcscd and returns once its socket takes
// connections (at most 10 s); the card is seen about half a second later.
func (c *Card) StartPCSCD(t testing.TB) {
	t.Helper()
	c.rig.mu.Lock()
	running := c.rig.pcscd != nil
	c.rig.mu.Unlock()
	if running {
		t.Fatal("card rig: pcscd is already running")
	}
	run := filepath.Join(c.Dir, "run")
	sock := filepath.Join(run, "pcscd", "pcscd.comm")
	// What a pcscd killed may have left; the directory is the rig's.
	os.Remove(sock)
	os.Remove(filepath.Join(run, "pcscd", "pcscd.pid"))
	// pcscd 1.9.9 has its socket at a fixed /run/pcscd/pcscd.comm: in a
	// mount namespace of its own, /run is the rig's directory.
	script := "mount --bind " + run + " /run && exec pcscd -f -i -c " + filepath.Join(c.Dir, "conf")
	p := startRig(t, c.Dir, "pcscd", "nsenter", "-t", c.pid(c.rig.netns), "-n",
		"unshare", "-m", "--propagation", "private", "sh", "-c", script)
	c.rig.mu.Lock()
	c.rig.pcscd = p
	c.rig.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("unix", sock)
		if err == nil {
			conn.Close()
			return
		}
		if p.exited() {
			t.Fatalf("card rig: pcscd exited at start:\n%s", tail(filepath.Join(c.Dir, "pcscd.log"), 20))
		}
		if time.Now().After(deadline) {
			t.Fatalf("card rig: pcscd's socket took no connection within 10 s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop stops the rig's processes, the bridge first.
func (c *Card) stop() {
	c.rig.mu.Lock()
	procs := []*rigProc{c.bridge, c.rig.pcscd, c.rig.netns}
	c.rig.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			p.stop()
		}
	}
}

func (c *Card) pid(p *rigProc) string { return strconv.Itoa(p.cmd.Process.Pid) }

func (c *Card) control() string { return filepath.Join(c.Dir, "ctl-"+c.name) }

// command sends one line to the bridge's control socket and returns its
// answer.
func (c *Card) command(t testing.TB, line string) string {
	t.Helper()
	conn, err := net.DialTimeout("unix", c.control(), 5*time.Second)
	if err != nil {
		t.Fatalf("card rig: the bridge's control socket: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(line + "\n")); err != nil {
		t.Fatalf("card rig: %s: %v", line, err)
	}
	answer, err := bufio.NewReader(conn).ReadString('\n')
	answer = strings.TrimSpace(answer)
	if err != nil || strings.HasPrefix(answer, "error") {
		t.Fatalf("card rig: %s: %q %v", line, answer, err)
	}
	return answer
}

// waitListed waits until pkcs11-tool, through OpenSC and pcscd, lists n
// cards labelled as this one.
func (c *Card) waitListed(t testing.TB, n int, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var out []byte
	for ctx.Err() == nil {
		cmd := exec.CommandContext(ctx, "pkcs11-tool", "--module", c.Module, "-L")
		cmd.Env = append(os.Environ(), c.Env...)
		out, _ = cmd.CombinedOutput()
		if strings.Count(string(out), "token label        : "+c.Label+"\n") == n {
			return
		}
		if c.bridge.exited() {
			t.Fatalf("card rig: the bridge exited:\n%s", tail(filepath.Join(c.Dir, c.name+".log"), 20))
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("card rig: OpenSC did not list %d cards labelled %q within %v; pkcs11-tool -L said:\n%s", n, c.Label, within, out)
}
