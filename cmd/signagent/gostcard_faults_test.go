package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
)

// The two card faults of issue 48's bad inputs, made by the GOST card
// itself (pkcs11test.GOSTCard.SetFault), through OpenSC and pcscd: the
// card answers 6A82 to the SELECT of its key (a key another program
// deleted), and the card is pulled out right after it accepted the PIN,
// before the key's SELECT, MSE and PSO reach it.

// verifies counts the VERIFYs with a PIN the card was sent.
func (r *gostCardRig) verifies(t *testing.T) int {
	return strings.Count(r.card.BridgeLog(t), "APDU 00 20 00 02 [8 bytes hidden]")
}

// pso counts the signatures the card was asked for.
func (r *gostCardRig) psos(t *testing.T) int {
	return strings.Count(r.card.BridgeLog(t), "APDU 00 2A 9E 9A")
}

// TestGOSTCardFaultsCLI: signagent sign --out on either fault: one line,
// exit 1, the PIN sent once and accepted (the tries counter full), no
// signature asked of the card, no file written.
func TestGOSTCardFaultsCLI(t *testing.T) {
	t.Parallel()
	r := newGOSTCardRig(t, pkcs11test.GOSTCardOptions{LogAPDUs: true})
	for _, c := range []struct {
		what, fault, apdu string
	}{
		{"the key's SELECT answered 6A82", pkcs11test.GOSTFaultSelectKey6A82, "APDU 00 A4 08 00 [8] 1000100060020001 Le=256 -> 6A82"},
		{"the card removed between VERIFY and PSO", pkcs11test.GOSTFaultRemoveAfterVerify, "card removed right after a VERIFY"},
	} {
		t.Run(c.what, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "sig.der")
			r.card.SetFault(t, c.fault)
			verifies, psos, before := r.verifies(t), r.psos(t), len(r.card.BridgeLog(t))
			cmd := signagent(t, r.env(), append([]string{"trusted", "sign", "--phone", "9161234567", "--out", out}, r.args(r.card.PINFile)...)...)
			code, stderr, _ := runBinary(t, cmd)
			log := r.card.BridgeLog(t)[before:]
			if code != cmdutil.ExitFailure {
				t.Fatalf("exit %d, want %d: %s", code, cmdutil.ExitFailure, stderr)
			}
			oneLine(t, stderr, `could not sign with key "`+r.card.KeyLabel+`": the token reported a device error (CKR_GENERAL_ERROR); check the reader and the token; reconnecting it often helps`)
			if !strings.Contains(log, c.apdu) {
				t.Fatalf("the card did not make the fault (%s):\n%s", c.apdu, log)
			}
			if n := r.verifies(t) - verifies; n != 1 || !strings.Contains(log, "[8 bytes hidden] -> 9000") {
				t.Fatalf("%d VERIFYs with the PIN, want 1, accepted:\n%s", n, log)
			}
			if n := r.psos(t) - psos; n != 0 {
				t.Fatalf("%d signatures asked of the card", n)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Fatalf("--out %s was written (%v)", out, err)
			}
			if m, _ := filepath.Glob(filepath.Join(filepath.Dir(out), "*")); len(m) != 0 {
				t.Fatalf("left in --out's directory: %v", m)
			}
			r.noPINSpent(t)
			t.Logf("%s: exit %d: %s", c.what, code, strings.TrimSpace(stderr))
			r.card.SetFault(t, pkcs11test.GOSTFaultClear)
			r.card.Insert(t) // back, if the fault took it out
		})
	}
}

// TestGOSTCardFaultsAgent: /v1/signatures on either fault: 503
// token_not_ready with the same line as the command line's, the PIN sent
// at most once per signature asked (the right one: the tries counter stays
// full), serve keeps running and signs again once the card is whole.
func TestGOSTCardFaultsAgent(t *testing.T) {
	t.Parallel()
	r := newGOSTCardRig(t, pkcs11test.GOSTCardOptions{LogAPDUs: true})
	a := r.serve(t)
	ready := func() bool { code, _ := a.do("GET", "/readyz", ""); return code == 200 }
	r.signOK(t, a, "at start")
	const line = `could not sign with key \"signagent gost key\": the token reported a device error (CKR_GENERAL_ERROR); check the reader and the token; reconnecting it often helps`
	// refused asks for a signature that must fail on the card's fault,
	// and returns the card's log of it.
	refused := func(t *testing.T, what string) string {
		t.Helper()
		verifies, before := r.verifies(t), len(r.card.BridgeLog(t))
		code, body := a.sign()
		log := r.card.BridgeLog(t)[before:]
		if code != 503 || !strings.Contains(body, `"code":"token_not_ready"`) || !strings.Contains(body, line) {
			t.Fatalf("%s: HTTP %d %s, want 503 token_not_ready naming the key\n%s", what, code, body, log)
		}
		if n := r.verifies(t) - verifies; n > 1 {
			t.Fatalf("%s: the PIN sent %d times\n%s", what, n, log)
		}
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "APDU 00 2A 9E 9A") && strings.Contains(l, "-> 9000") {
				t.Fatalf("%s: the card signed:\n%s", what, log)
			}
		}
		t.Logf("%s: HTTP %d %s", what, code, body)
		return log
	}

	t.Run("the key's SELECT answered 6A82", func(t *testing.T) {
		r.card.SetFault(t, pkcs11test.GOSTFaultSelectKey6A82)
		for _, what := range []string{"the first signature", "again once the agent reopened the token"} {
			waitFor(t, 10*time.Second, what+": ready", ready)
			if log := refused(t, what); !strings.Contains(log, "-> 6A82") {
				t.Fatalf("%s: the card did not answer 6A82:\n%s", what, log)
			}
		}
		r.card.SetFault(t, pkcs11test.GOSTFaultClear)
		waitFor(t, 10*time.Second, "ready once the key is back", ready)
		r.signOK(t, a, "the key back")
	})

	t.Run("the card removed between VERIFY and PSO", func(t *testing.T) {
		// A reset by another process logs the card out: OpenSC's first
		// PSO gets 6982, it sends the PIN it keeps (VERIFY), and the card
		// goes out before the PSO is sent again.
		r.card.SetFault(t, pkcs11test.GOSTFaultRemoveAfterVerify)
		reset := exec.Command("opensc-tool", "--reader", "0", "--reset")
		reset.Env = append(os.Environ(), r.card.Env...)
		if out, err := reset.CombinedOutput(); err != nil {
			t.Fatalf("opensc-tool --reset: %v\n%s", err, out)
		}
		log := refused(t, "the signature")
		if !strings.Contains(log, "[8 bytes hidden] -> 9000") || !strings.Contains(log, "card removed right after a VERIFY") {
			t.Fatalf("the card was not removed right after a VERIFY:\n%s", log)
		}
		waitFor(t, 10*time.Second, "/readyz 503 with the card out", func() bool { return !ready() })
		r.card.Insert(t)
		waitFor(t, 10*time.Second, "ready with the card back", ready)
		r.signOK(t, a, "the card back")
	})
	r.noPINSpent(t)
	if a.cmd.ProcessState != nil {
		t.Fatalf("serve exited: %s", a.stderr.String())
	}
}
