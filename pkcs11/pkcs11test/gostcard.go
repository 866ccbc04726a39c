package pkcs11test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/internal/gost"
)

// The GOST card rig: the card rig (card.go) with a Rutoken ECP in the
// reader instead of libcacard's CAC card. The card is rutoken-card
// (package rutoken, built here with go), a card process of the project's
// own that answers the APDUs OpenSC's rutoken_ecp driver sends
// (../shared/spec/gost-card-opensc.md section 2), signing with
// internal/gost. OpenSC's own pkcs15-init personalises it as a user would
// a new card: erase, a PKCS#15 application with an SO PIN, the user PIN
// (auth ID 02), a GOST R 34.10-2001 key generated on the card (auth ID 02,
// ID 01, CryptoPro-A). OpenSC's opensc-pkcs11.so then shows the key as
// CKK_GOSTR3410 and offers only the raw CKM_GOSTR3410 (and its key pair
// generation): no 2012 mechanism, no hashing on the token, no certificate.
//
// What a test gets (GOSTCard): Module, Label, Serial and PIN/PINFile as
// for the CAC card (Selection selects the key with the PIN file), SOPIN,
// the key's ID and label, and PublicKey, the key the card generated. The
// Card's methods work on it as on the CAC card: Remove, Insert,
// InsertInto, SetDelay, SetSignDelay (the slow card: a wait before each
// signature's answer), TriesLeft (the user PIN's), StopPCSCD, StartPCSCD,
// BridgeLog (with LogAPDUs, every APDU, PINs hidden). SetFault makes the
// card answer 6A82 to its key's SELECT, or takes it out right after a
// VERIFY (before the signature). Restart stops the
// card process and starts it again on its state file (0600, in the rig's
// directory): files, PINs with their counters and keys survive it, as a
// card's memory does. AddGOSTCard puts a second card, personalised the
// same way with its own key and serial, into reader 1.

// GOSTCardOptions shape a rig GOST card.
type GOSTCardOptions struct {
	// PIN is the user PIN, 4 to 32 characters (default "12345678").
	PIN string
	// SOPIN is the security officer's PIN, 8 to 32 characters (default
	// "87654321"): it unblocks the user PIN.
	SOPIN string
	// Serial is the card's serial number in hex, 1 to 8 bytes (default:
	// random, 4 bytes): every card has its own, as real cards do.
	Serial string
	// Label is the PKCS#15 application's label (default "signagent gost");
	// OpenSC names the token after it and the user PIN's label.
	Label string
	// Delay is waited before every answer to an APDU (a card's speed).
	Delay time.Duration
	// SignDelay is waited, besides Delay, before a signature's answer.
	SignDelay time.Duration
	// LogAPDUs logs every APDU and its answer in the card's log.
	LogAPDUs bool
	// ForProcesses: as CardOptions.ForProcesses.
	ForProcesses bool
}

// GOSTCard is a running GOST card rig.
type GOSTCard struct {
	*Card
	// SOPIN is the security officer's PIN.
	SOPIN string
	// PublicKey is the card's key, as the card generated it (CryptoPro-A).
	PublicKey *gost.PublicKey
}

// GOSTCardKeyLabel labels the key pair pkcs15-init generates; its ID is
// GOSTCardKeyID.
const GOSTCardKeyLabel = "signagent gost key"

// GOSTCardKeyID is the ID of the key pair.
var GOSTCardKeyID = []byte{0x01}

// GOSTCardTries is the count of wrong user PINs after which the PIN blocks
// (OpenSC's rutoken_ecp profile); the SO PIN has 10.
const GOSTCardTries = 5

// gostCard is what a GOST card's process needs.
type gostCard struct {
	bin    string // rutoken-card, built in the rig's directory
	serial string
	state  string // the card's state file
	label  string
}

// NewGOSTCard starts a GOST card rig, personalises the card with
// pkcs15-init and waits (at most 20 s) until OpenSC lists its token. As
// NewCard, it sets CardSocketEnv for the test and needs root.
func NewGOSTCard(t testing.TB, o GOSTCardOptions) *GOSTCard {
	t.Helper()
	start := time.Now()
	if o.PIN == "" {
		o.PIN = "12345678"
	}
	if o.SOPIN == "" {
		o.SOPIN = "87654321"
	}
	if o.Label == "" {
		o.Label = "signagent gost"
	}
	if len(o.PIN) < 4 || len(o.PIN) > 32 || len(o.SOPIN) < 8 || len(o.SOPIN) > 32 {
		t.Fatal("a rig GOST card's PIN is 4 to 32 characters, its SO PIN 8 to 32 (OpenSC's rutoken_ecp profile)")
	}
	needCardTools(t, []struct{ name, pkg string }{{"pkcs15-init", "opensc"}, {"opensc-tool", "opensc"}})
	c := &Card{Module: openSCModule(t), PIN: o.PIN, KeyID: GOSTCardKeyID, KeyLabel: GOSTCardKeyLabel,
		rig: &cardRig{}, name: "bridge", opts: CardOptions{Delay: o.Delay, SignDelay: o.SignDelay, LogAPDUs: o.LogAPDUs, ForProcesses: o.ForProcesses}}
	c.startRig(t)
	rig := time.Since(start)
	g := &GOSTCard{Card: c, SOPIN: o.SOPIN}
	c.gost = &gostCard{bin: buildGOSTCard(t, c.Dir), label: o.Label}
	built := time.Since(start)
	g.insertNew(t, o.Serial, 1)
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	t.Logf("GOST card rig up in %v: pcscd %v, the card built %v, inserted and personalised %v (%s)",
		ms(time.Since(start)), ms(rig), ms(built-rig), ms(time.Since(start)-built), c.Dir)
	return g
}

// AddGOSTCard puts a second GOST card into reader 1 of g's rig, with the
// same label and PINs, its own key and serial (serial: hex, "" for a random
// one). It waits (at most 20 s) until OpenSC lists both.
func (g *GOSTCard) AddGOSTCard(t testing.TB, serial string) *GOSTCard {
	t.Helper()
	if g.reader != 0 || g.name != "bridge" {
		t.Fatal("card rig: add the second card to the first")
	}
	two := *g.Card
	two.bridge, two.name, two.reader = nil, "bridge2", 1
	two.gost = &gostCard{bin: g.gost.bin, label: g.gost.label}
	g2 := &GOSTCard{Card: &two, SOPIN: g.SOPIN}
	t.Cleanup(func() {
		two.rig.mu.Lock()
		p := two.bridge
		two.rig.mu.Unlock()
		if p != nil {
			p.stop()
		}
		if t.Failed() {
			t.Logf("the card rig's bridge2.log:\n%s", tail(filepath.Join(g.Dir, "bridge2.log"), 40))
		}
	})
	g2.insertNew(t, serial, 2)
	return g2
}

// insertNew starts a blank card with serial in the card's reader,
// personalises it and waits until OpenSC lists n cards of its label.
func (g *GOSTCard) insertNew(t testing.TB, serial string, n int) {
	t.Helper()
	if serial == "" {
		b := make([]byte, 4)
		rand.Read(b)
		serial = hex.EncodeToString(b)
	}
	if b, err := hex.DecodeString(serial); err != nil || len(b) == 0 || len(b) > 8 {
		t.Fatalf("card rig: GOST card serial %q: 1 to 8 bytes in hex", serial)
	}
	g.gost.serial = strings.ToLower(serial)
	g.gost.state = filepath.Join(g.Dir, g.name+".state")
	g.Serial = g.gost.serial
	g.startBridge(t)
	g.personalise(t)
	g.Label = g.gost.label + " (User PIN)"
	g.waitListed(t, n, 20*time.Second)
	g.PublicKey = g.CardPublicKey(t)
}

// personalise runs OpenSC's pkcs15-init on the card as a user would on a
// new card. The PINs reach it through its environment (env:NAME), not
// its arguments.
func (g *GOSTCard) personalise(t testing.TB) {
	t.Helper()
	reader := strconv.Itoa(g.reader)
	// pcscd sees a new card at its next poll (about 0.4 s).
	g.waitReader(t, true)
	pins := []string{"--pin", "env:SIGNAGENT_RIG_PIN", "--so-pin", "env:SIGNAGENT_RIG_SO_PIN"}
	for _, args := range [][]string{
		{"--erase-card"},
		{"--create-pkcs15", "--so-pin", "env:SIGNAGENT_RIG_SO_PIN", "--so-puk", "", "--label", g.gost.label},
		append([]string{"--store-pin", "--auth-id", "02", "--puk", "", "--label", "User PIN"}, pins...),
		append([]string{"--generate-key", "gost2001", "--auth-id", "02", "--id", hex.EncodeToString(g.KeyID), "--label", g.KeyLabel}, pins...),
	} {
		cmd := exec.Command("pkcs15-init", append([]string{"--reader", reader}, args...)...)
		cmd.Env = append(os.Environ(), g.Env...)
		cmd.Env = append(cmd.Env, "SIGNAGENT_RIG_PIN="+g.PIN, "SIGNAGENT_RIG_SO_PIN="+g.SOPIN)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("card rig: pkcs15-init %s: %v\n%s\nthe card's log:\n%s", args[0], err, out, tail(filepath.Join(g.Dir, g.name+".log"), 30))
		}
	}
}

// startGOSTCard starts the GOST card's process on its state file.
func (c *Card) startGOSTCard(t testing.TB) {
	t.Helper()
	o := c.opts
	args := []string{"-t", c.pid(c.rig.netns), "-n"}
	if o.LogAPDUs {
		args = append(args, "env", "RUTOKEN_CARD_DEBUG=1")
	}
	args = append(args, c.gost.bin, "-state", c.gost.state, "-serial", c.gost.serial,
		"-port", strconv.Itoa(cardPort), "-reader", strconv.Itoa(c.reader), "-control", c.control(),
		"-delay", strconv.Itoa(int(o.Delay/time.Millisecond)), "-sign-delay", strconv.Itoa(int(o.SignDelay/time.Millisecond)))
	p := startRig(t, c.Dir, c.name, "nsenter", args...)
	c.rig.mu.Lock()
	c.bridge = p
	c.rig.mu.Unlock()
	// Ready once its control socket answers.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(c.control()); err == nil {
			return
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("card rig: the GOST card did not start:\n%s", tail(p.log, 20))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart stops the card's process and starts it again on its state file:
// a card taken out and put back after a while, or a card that lost power.
// It returns once pcscd has seen the card go and come back. Delays set
// since the start are lost (the options' come back).
func (g *GOSTCard) Restart(t testing.TB) {
	t.Helper()
	g.Remove(t)
	g.waitReader(t, false)
	g.rig.mu.Lock()
	p := g.bridge
	g.rig.mu.Unlock()
	p.stop()
	os.Remove(g.control())
	g.startBridge(t)
	g.waitReader(t, true)
}

// waitReader waits (at most 10 s) until pcscd sees the card in its reader,
// or sees the reader empty.
func (g *GOSTCard) waitReader(t testing.TB, present bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cmd := exec.Command("opensc-tool", "--reader", strconv.Itoa(g.reader), "--atr")
		cmd.Env = append(os.Environ(), g.Env...)
		out, err := cmd.CombinedOutput()
		if (err == nil) == present {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("card rig: pcscd did not see the GOST card present=%v within 10 s: %v\n%s", present, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// GOST card faults, for SetFault.
const (
	// GOSTFaultSelectKey6A82: every SELECT of the private key (by FID or
	// path) answers 6A82, file not found, as a card whose key was deleted
	// by another program would; the key, the PIN and its counter are
	// untouched. Until cleared.
	GOSTFaultSelectKey6A82 = "select-key 6A82"
	// GOSTFaultRemoveAfterVerify: the card is taken out (as by Remove)
	// right after it answers 9000 to the next VERIFY with a PIN, before the
	// key's SELECT, MSE and PSO reach it: a card pulled between the login
	// and the signature. Once; Insert puts it back.
	GOSTFaultRemoveAfterVerify = "remove-after-verify"
	// GOSTFaultClear clears both.
	GOSTFaultClear = "clear"
)

// SetFault sets a fault of the card (GOSTFaultSelectKey6A82,
// GOSTFaultRemoveAfterVerify, GOSTFaultClear): the card's control command
// "fault".
func (g *GOSTCard) SetFault(t testing.TB, fault string) {
	t.Helper()
	g.command(t, "fault "+fault)
}

// Faults is the card's faults set: "none", or e.g. "select-key=6A82".
func (g *GOSTCard) Faults(t testing.TB) string {
	t.Helper()
	return g.command(t, "fault")
}

// CardPublicKey asks the card (not OpenSC) for its key's public half.
func (g *GOSTCard) CardPublicKey(t testing.TB) *gost.PublicKey {
	t.Helper()
	f := strings.Fields(g.command(t, "pubkey "+strconv.Itoa(int(g.KeyID[len(g.KeyID)-1]))))
	if len(f) != 2 {
		t.Fatalf("card rig: the card's public key: %q", f)
	}
	value, err := hex.DecodeString(f[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range gost.Curves() {
		if c.Name == f[0] {
			k, err := gost.NewPublicKey(c, value)
			if err != nil {
				t.Fatal(err)
			}
			return k
		}
	}
	t.Fatalf("card rig: the card's key is on %q, a curve internal/gost does not know", f[0])
	return nil
}

// buildGOSTCard builds rutoken-card into dir with the go command that runs
// the tests.
func buildGOSTCard(t testing.TB, dir string) string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("card rig: cannot find the rig's sources to build the GOST card")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("card rig: the go command is not on PATH; it builds the GOST card")
	}
	bin := filepath.Join(dir, "rutoken-card")
	cmd := exec.Command(goCmd, "build", "-o", bin, "./rutoken/cmd/rutoken-card")
	cmd.Dir = filepath.Dir(self)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("card rig: build the GOST card: %v\n%s", err, out)
	}
	return bin
}
