package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
)

// The command line on the card rig: a card behind pcscd and OpenSC
// (issue 37). The binary is this test binary run as signagent, with the
// rig's pcscd socket in its environment.

// cardArgs selects the card's first key with its PIN file.
func cardArgs(card *pkcs11test.Card, pinFile string) []string {
	return []string{"--module", card.Module, "--token-label", card.Label, "--key-label", card.KeyLabel, "--pin-file", pinFile}
}

// cardEnv is the environment of a command on the card.
func cardEnv(card *pkcs11test.Card) []string {
	return append([]string{"SIGNAGENT_API_KEY=" + testAPIKey}, card.Env...)
}

// cardWrongPINs counts the wrong PINs the card was sent so far.
func cardWrongPINs(t *testing.T, card *pkcs11test.Card) int {
	return strings.Count(card.BridgeLog(t), "wrong PIN")
}

// TestCardCLI: sign and session on the card, and serve through the card's
// removal and return.
func TestCardCLI(t *testing.T) {
	t.Parallel()
	card := pkcs11test.NewCard(t, pkcs11test.CardOptions{ForProcesses: true})

	t.Run("sign: OpenSSL verifies with the card's certificate", func(t *testing.T) {
		dir := t.TempDir()
		sig, text := filepath.Join(dir, "sig.der"), filepath.Join(dir, "text")
		cmd := signagent(t, cardEnv(card), append([]string{"trusted", "sign", "--phone", "9161234567", "--out", sig, "--text-out", text},
			cardArgs(card, card.PINFile)...)...)
		if code, stderr, took := runBinary(t, cmd); code != cmdutil.ExitOK {
			t.Fatalf("sign on the card: exit %d after %v: %s", code, took, stderr)
		}
		der, err := os.ReadFile(sig)
		if err != nil {
			t.Fatal(err)
		}
		content, err := os.ReadFile(text)
		if err != nil {
			t.Fatal(err)
		}
		if ok, out := signertest.OpenSSLVerify(t, der, content, card.Certs[:1]); !ok {
			t.Fatalf("openssl cms -verify rejected the card's signature:\n%s", out)
		}
	})

	t.Run("session: trusted authentication with the card's key", func(t *testing.T) {
		emu := startEmulator(t, &emulator.Config{
			Partners: []emulator.Partner{{Name: "p", APIKey: testAPIKey, Certificates: []string{string(signertest.PEM(card.Cert))}}},
			Users:    []emulator.User{{ID: "u1", Phone: "9161234567", Linked: []string{"p:crm-42"}}},
		})
		var stdout strings.Builder
		cmd := signagent(t, cardEnv(card), append([]string{"trusted", "session", "--phone", "9161234567", "--service-user-id", "crm-42",
			"--trusted-url", emu.URL()}, cardArgs(card, card.PINFile)...)...)
		cmd.Stdout = &stdout
		if code, stderr, _ := runBinary(t, cmd); code != cmdutil.ExitOK || len(strings.TrimSpace(stdout.String())) != 43 {
			t.Fatalf("session on the card: exit %d, stdout %q: %s", code, stdout.String(), stderr)
		}
	})

	t.Run("serve: the card removed and back, pcscd stopped and back", func(t *testing.T) {
		sock := filepath.Join(shortDir(t), "a.sock")
		env := append(cardEnv(card), "SIGNAGENT_PIN_FILE="+card.PINFile, "SIGNAGENT_TOKEN_LABEL="+card.Label,
			"SIGNAGENT_KEY_LABEL="+card.KeyLabel, "SIGNAGENT_PKCS11_MODULE="+card.Module)
		a := startServe(t, signagent(t, env, "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull), sock)
		ready := func() bool { code, _ := a.do("GET", "/readyz", ""); return code == 200 }
		waitFor(t, 10*time.Second, "ready at start", ready)
		if code, body := a.sign(); code != 200 {
			t.Fatalf("a signature: %d %s", code, body)
		}
		for _, step := range []struct {
			what          string
			take, putBack func(testing.TB)
		}{
			{"the card removed", card.Remove, card.Insert},
			{"pcscd stopped", card.StopPCSCD, card.StartPCSCD},
		} {
			step.take(t)
			out := waitFor(t, 5*time.Second, step.what+": /readyz 503", func() bool { return !ready() })
			if code, body := a.sign(); code != 503 || !strings.Contains(body, `"token_not_ready"`) {
				t.Fatalf("%s: a signature answered %d %s, want 503 token_not_ready", step.what, code, body)
			}
			step.putBack(t)
			in := waitFor(t, 5*time.Second, step.what+", then back: /readyz 200", ready)
			if code, body := a.sign(); code != 200 {
				t.Fatalf("%s, then back: a signature answered %d %s", step.what, code, body)
			}
			t.Logf("%s: /readyz 503 after %v; back: 200 after %v", step.what, out.Round(time.Millisecond), in.Round(time.Millisecond))
		}
		if n, w := card.TriesLeft(t), cardWrongPINs(t, card); n != 3 || w != 0 {
			t.Fatalf("the card has %d PIN tries left (want 3), was sent %d wrong PINs (want 0)", n, w)
		}
		if a.cmd.ProcessState != nil {
			t.Fatalf("serve exited: %s", a.stderr.String())
		}
	})
}

// TestCardCLIPIN: a wrong PIN costs one try for each run that sends it,
// the final try is not spent without --allow-final-pin-try, and a blocked
// card is one clear line.
func TestCardCLIPIN(t *testing.T) {
	t.Parallel()
	card := pkcs11test.NewCard(t, pkcs11test.CardOptions{LogAPDUs: true, ForProcesses: true})
	wrong := filepath.Join(t.TempDir(), "pin")
	if err := os.WriteFile(wrong, []byte("654321\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := func(pinFile string) (int, string) {
		sock := filepath.Join(shortDir(t), "a.sock")
		cmd := signagent(t, cardEnv(card), append([]string{"serve", "--listen", "unix:" + sock, "--audit-log", os.DevNull},
			cardArgs(card, pinFile)...)...)
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill() // serve did not exit: it took the PIN
			}
		}()
		code, stderr, _ := runBinary(t, cmd)
		return code, stderr
	}
	sign := func(pinFile string, extra ...string) (int, string) {
		cmd := signagent(t, cardEnv(card), append(append([]string{"trusted", "sign", "--phone", "9161234567", "--format", "base64"},
			cardArgs(card, pinFile)...), extra...)...)
		cmd.Stdout = nil
		code, stderr, _ := runBinary(t, cmd)
		return code, stderr
	}

	// serve with a wrong PIN: one try, then it exits and says so.
	code, stderr := serve(wrong)
	if code != cmdutil.ExitFailure {
		t.Fatalf("serve with a wrong PIN: exit %d, want 1: %s", code, stderr)
	}
	oneLine(t, stderr, "the token rejected the PIN")
	if n, w := card.TriesLeft(t), cardWrongPINs(t, card); n != 2 || w != 1 {
		t.Fatalf("after serve with a wrong PIN: %d tries left (want 2), %d wrong PINs sent (want 1)", n, w)
	}
	// Another run sends it again (a new process does not know it was
	// refused); the card then says one try is left, and the next run
	// does not spend it.
	if code, stderr := sign(wrong); code != cmdutil.ExitFailure || !strings.Contains(stderr, "the token rejected the PIN") {
		t.Fatalf("sign with a wrong PIN: exit %d: %s", code, stderr)
	}
	code, stderr = sign(wrong)
	if code != cmdutil.ExitFailure {
		t.Fatalf("sign with a wrong PIN and one try left: exit %d, want 1: %s", code, stderr)
	}
	oneLine(t, stderr, "--allow-final-pin-try")
	if n, w := card.TriesLeft(t), cardWrongPINs(t, card); n != 1 || w != 2 {
		t.Fatalf("with one try left: %d tries left (want 1), %d wrong PINs sent (want 2)", n, w)
	}
	t.Logf("the final try kept: %s", strings.TrimSpace(stderr))

	// The final try spent on purpose blocks the card (6983 from then on).
	if code, stderr := sign(wrong, "--allow-final-pin-try"); code != cmdutil.ExitFailure {
		t.Fatalf("sign with the final try: exit %d: %s", code, stderr)
	}
	if n := card.TriesLeft(t); n != 0 {
		t.Fatalf("%d tries left after the final one, want 0", n)
	}
	// A VERIFY with a PIN in it (8 bytes, padded).
	verifies := func() int { return strings.Count(card.BridgeLog(t), "APDU 00 20 00 00 (13 bytes)") }
	for _, run := range []func() (int, string){
		func() (int, string) { return sign(card.PINFile) },
		func() (int, string) { return serve(card.PINFile) },
	} {
		before := verifies()
		code, stderr := run()
		if n := verifies() - before; n > 1 {
			t.Fatalf("%d PINs sent to a blocked card by one run", n)
		}
		if code != cmdutil.ExitFailure {
			t.Fatalf("on a blocked card: exit %d, want 1: %s", code, stderr)
		}
		oneLine(t, stderr, "PIN is locked")
		t.Logf("blocked: %s", strings.TrimSpace(stderr))
	}
}

// TestCardCLITwoCards: two cards of one label (and one serial: libcacard
// gives every card the same) in the rig's two readers. `tokens` lists
// both; a selection by label alone is refused in one line naming both
// slots and how to choose, before any PIN is sent; a pkcs11: URI's
// slot-id chooses one, and only that card is sent the PIN.
func TestCardCLITwoCards(t *testing.T) {
	t.Parallel()
	card := pkcs11test.NewCard(t, pkcs11test.CardOptions{LogAPDUs: true, ForProcesses: true})
	two := card.AddCard(t)
	verifies := func(c *pkcs11test.Card) int { return strings.Count(c.BridgeLog(t), "APDU 00 20 00 00 (13 bytes)") }

	var stdout strings.Builder
	cmd := signagent(t, cardEnv(card), "token", "list", "--module", card.Module)
	cmd.Stdout = &stdout
	if code, stderr, _ := runBinary(t, cmd); code != cmdutil.ExitOK {
		t.Fatalf("tokens with two cards: exit %d: %s", code, stderr)
	}
	if n := strings.Count(stdout.String(), card.Label); n != 2 {
		t.Fatalf("tokens lists %q %d times, want 2:\n%s", card.Label, n, stdout.String())
	}
	t.Logf("tokens:\n%s", stdout.String())
	slots := cardSlots(t, card)

	sign := func(args ...string) (int, string) {
		cmd := signagent(t, cardEnv(card), append([]string{"trusted", "sign", "--phone", "9161234567", "--format", "base64", "--module", card.Module,
			"--pin-file", card.PINFile}, args...)...)
		cmd.Stdout = nil
		code, stderr, _ := runBinary(t, cmd)
		return code, stderr
	}
	code, stderr := sign("--token-label", card.Label, "--key-label", card.KeyLabel)
	if code != cmdutil.ExitBadInput {
		t.Fatalf("sign by a label two cards carry: exit %d, want %d: %s", code, cmdutil.ExitBadInput, stderr)
	}
	oneLine(t, stderr, "slot-id=")
	for _, s := range slots {
		if !strings.Contains(stderr, fmt.Sprintf("slot %d", s)) {
			t.Fatalf("the refusal does not name slot %d: %s", s, stderr)
		}
	}
	t.Logf("by label alone: %s", strings.TrimSpace(stderr))
	if n, m := verifies(card), verifies(two); n != 0 || m != 0 {
		t.Fatalf("a refused selection sent the PIN %d and %d times, want none", n, m)
	}

	// The URI's slot-id chooses the card in reader 1.
	uri := fmt.Sprintf("pkcs11:slot-id=%d;token=%s;object=%s", slots[1], url.PathEscape(card.Label), url.PathEscape(card.KeyLabel))
	if code, stderr := sign("--key", uri); code != cmdutil.ExitOK {
		t.Fatalf("sign with %s: exit %d: %s", uri, code, stderr)
	}
	if n, m := verifies(card), verifies(two); n != 0 || m != 1 {
		t.Fatalf("sign by slot %d sent the PIN to the card in reader 0 %d times and to the one in reader 1 %d times; want 0 and 1", slots[1], n, m)
	}
	checkNoPINSpentCLI(t, card)
	if n, m := card.TriesLeft(t), two.TriesLeft(t); n != 3 || m != 3 {
		t.Fatalf("tries left: %d and %d, want 3 and 3", n, m)
	}
}

// cardSlots are the slots in which OpenSC, in this process, shows tokens
// labelled as card, in order.
func cardSlots(t *testing.T, card *pkcs11test.Card) []uint {
	t.Helper()
	var stdout strings.Builder
	cmd := signagent(t, cardEnv(card), "token", "list", "--json", "--module", card.Module)
	cmd.Stdout = &stdout
	if code, stderr, _ := runBinary(t, cmd); code != cmdutil.ExitOK {
		t.Fatalf("token list --json: exit %d: %s", code, stderr)
	}
	var list struct {
		Tokens []struct {
			Slot  uint
			Label string
		}
	}
	if err := json.Unmarshal([]byte(stdout.String()), &list); err != nil {
		t.Fatalf("token list --json: %v\n%s", err, stdout.String())
	}
	toks := list.Tokens
	var slots []uint
	for _, tok := range toks {
		if tok.Label == card.Label {
			slots = append(slots, tok.Slot)
		}
	}
	if len(slots) != 2 {
		t.Fatalf("OpenSC shows %d tokens labelled %q, want 2: %+v", len(slots), card.Label, toks)
	}
	return slots
}

// TestCardCLINoPCSCD: sign with OpenSC while pcscd is not running (no
// reader at all) is one line saying so, exit 2 (the token is not there),
// at once rather than at --token-timeout, and sends no PIN.
func TestCardCLINoPCSCD(t *testing.T) {
	t.Parallel()
	card := pkcs11test.NewCard(t, pkcs11test.CardOptions{LogAPDUs: true, ForProcesses: true})
	card.StopPCSCD(t)
	pins := func() int { return strings.Count(card.BridgeLog(t), "APDU 00 20 00 00 (13 bytes)") } // a VERIFY with a PIN
	before := pins()
	cmd := signagent(t, cardEnv(card), append([]string{"trusted", "sign", "--phone", "9161234567", "--format", "base64", "--token-timeout", "30s"},
		cardArgs(card, card.PINFile)...)...)
	cmd.Stdout = nil
	code, stderr, took := runBinary(t, cmd)
	if code != cmdutil.ExitBadInput {
		t.Fatalf("sign without pcscd: exit %d after %v, want %d: %s", code, took, cmdutil.ExitBadInput, stderr)
	}
	oneLine(t, stderr, "pcscd running")
	t.Logf("sign without pcscd, after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(stderr))
	// Half the timeout leaves room for a race-built binary on a loaded
	// machine; waiting for the timeout would take all 30 s.
	if took > 15*time.Second {
		t.Errorf("sign without pcscd took %v, past --token-timeout", took)
	}
	if n := pins() - before; n != 0 {
		t.Fatalf("the card was sent the PIN %d times, want none", n)
	}
	checkNoPINSpentCLI(t, card)
}

// checkNoPINSpentCLI fails unless the card has all its tries and never saw
// a wrong PIN.
func checkNoPINSpentCLI(t *testing.T, card *pkcs11test.Card) {
	t.Helper()
	if n, w := card.TriesLeft(t), cardWrongPINs(t, card); n != 3 || w != 0 {
		t.Fatalf("the card has %d PIN tries left (want 3), was sent %d wrong PINs (want 0)", n, w)
	}
}
