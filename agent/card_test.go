package agent_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
)

// The agent on the card rig: a card behind pcscd and OpenSC (issue 37).
// The agent is started as serve starts it (agent.Start, the default token
// check every second), on the rig's card.

// cardAgent is a daemon serving on the rig's card.
type cardAgent struct {
	d      *agent.Daemon
	c      *agentclient.Client
	logs   *pkcs11test.LogBuffer
	cfg    agent.Config
	sock   string
	closed bool
}

// startCardAgent starts the agent on card with the PIN in pinFile (the
// card's own when empty), its configuration changed by each of opts. An
// error is Start's.
func startCardAgent(t testing.TB, card *pkcs11test.Card, pinFile string, opts ...func(*agent.Config)) (*cardAgent, error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sc") // short: a socket path has ~100 bytes at most
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sel := card.Selection()
	if pinFile != "" {
		sel.PIN.File = pinFile
	}
	sel.Timeout = 10 * time.Second
	a := &cardAgent{logs: &pkcs11test.LogBuffer{}, sock: filepath.Join(dir, "a.sock")}
	a.cfg = agent.Config{
		Listen: []string{"unix:" + a.sock}, AuditLog: os.DevNull, Token: sel, TokenConcurrency: 1, QueueSize: 64,
		APIKey: apiKey, SessionTTL: time.Hour, RequestDeadline: 10 * time.Second, MaxBody: 1 << 16,
		Policy: agent.Policy{ExposeCanonical: true},
		Log:    zerolog.New(a.logs), BearerTokenFile: filepath.Join(dir, "bearer"),
	}
	for _, o := range opts {
		o(&a.cfg)
	}
	a.d, err = agent.Start(context.Background(), a.cfg)
	if err != nil {
		return a, err
	}
	t.Cleanup(a.shutdown)
	a.c = agentclient.NewUnix(a.sock)
	return a, nil
}

func (a *cardAgent) shutdown() {
	if a.closed {
		return
	}
	a.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.d.Shutdown(ctx)
}

// sign asks the agent for a signature.
func (a *cardAgent) sign() (*agentapi.SignatureResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return a.c.Sign(ctx, agentapi.SignatureRequest{Credential: agentapi.Credential{Phone: "9161234567"}})
}

// ready is what /readyz answers: true for 200, false for 503.
func (a *cardAgent) ready(t *testing.T) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := a.c.Ready(ctx)
	var e *agentclient.Error
	switch {
	case err == nil:
		return true
	case errors.As(err, &e) && e.Status == 503:
		return false
	}
	t.Fatalf("/readyz: %v", err)
	return false
}

// waitReady polls /readyz every 50 ms until it says ready (or not), for at
// most 5 s, and returns how long that took.
func (a *cardAgent) waitReady(t *testing.T, want bool, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for a.ready(t) != want {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%s: /readyz did not turn ready=%v within 5 s\n%s", what, want, a.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// signVerified signs through the agent and verifies the CMS signature
// with OpenSSL against the card's certificate.
func (a *cardAgent) signVerified(t *testing.T, card *pkcs11test.Card) {
	t.Helper()
	res, err := a.sign()
	if err != nil {
		t.Fatalf("a signature on the card: %v", err)
	}
	der, err := base64.StdEncoding.DecodeString(res.Signature)
	if err != nil || res.Canonical == "" {
		t.Fatalf("the answer holds no signature and signed text: %v %+v", err, res)
	}
	if ok, out := signertest.OpenSSLVerify(t, der, []byte(res.Canonical), card.Certs[:1]); !ok {
		t.Fatalf("openssl cms -verify rejected the card's signature against its certificate:\n%s", out)
	}
	if ok, _ := signertest.OpenSSLVerify(t, der, []byte(res.Canonical+" "), card.Certs[:1]); ok {
		t.Fatal("openssl accepted the signature over another text")
	}
}

// wrongPINs counts the wrong PINs the card was sent so far.
func wrongPINs(t *testing.T, card *pkcs11test.Card) int {
	return strings.Count(card.BridgeLog(t), "wrong PIN")
}

// checkNoPINSpent fails unless the card has all its tries and never saw a
// wrong PIN.
func checkNoPINSpent(t *testing.T, card *pkcs11test.Card) {
	t.Helper()
	if n, w := card.TriesLeft(t), wrongPINs(t, card); n != 3 || w != 0 {
		t.Fatalf("the card has %d PIN tries left (want 3) and was sent %d wrong PINs (want 0)", n, w)
	}
}

// median and max of ds.
func spread(ds []time.Duration) (med, most time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

// cardCycles is how many times the card is removed and reinserted
// (SIGNAGENT_CARD_CYCLES; 10 for the figures).
func cardCycles() int {
	if n, err := strconv.Atoi(os.Getenv("SIGNAGENT_CARD_CYCLES")); err == nil && n > 0 {
		return n
	}
	return 3
}

// TestCardAgent runs the agent on the card through its life: a signature
// OpenSSL verifies, the card removed and reinserted while the agent is
// idle, pcscd stopped and started, the card removed in the middle of a
// signature, reset by another process, and shared with another process
// signing in a loop.
func TestCardAgent(t *testing.T) {
	card := pkcs11test.NewCard(t, pkcs11test.CardOptions{LogAPDUs: true})
	a, err := startCardAgent(t, card, "")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a signature OpenSSL verifies with the card's certificate", func(t *testing.T) {
		a.signVerified(t, card)
	})

	t.Run("removed and reinserted while idle: 503, then served again, no PIN spent", func(t *testing.T) {
		n := cardCycles()
		var out, in []time.Duration
		for range n {
			card.Remove(t)
			out = append(out, a.waitReady(t, false, "the card removed"))
			card.Insert(t)
			in = append(in, a.waitReady(t, true, "the card reinserted"))
		}
		a.signVerified(t, card)
		checkNoPINSpent(t, card)
		if !a.d.Ready() {
			t.Fatal("not ready after a signature")
		}
		outMed, outMax := spread(out)
		inMed, inMax := spread(in)
		t.Logf("%d removals: /readyz 503 after median %v, max %v; reinsertions: 200 after median %v, max %v",
			n, outMed.Round(time.Millisecond), outMax.Round(time.Millisecond), inMed.Round(time.Millisecond), inMax.Round(time.Millisecond))
		if outMed > 2*time.Second || inMed > 2*time.Second {
			t.Errorf("the issue asks for 2 s: removal median %v, reinsertion median %v", outMed, inMed)
		}
	})

	t.Run("reinserted into another reader: found again in its new slot, no PIN spent", func(t *testing.T) {
		from := cardSlot(t, card)
		card.Remove(t)
		a.waitReady(t, false, "the card removed from reader 0")
		card.InsertInto(t, 1)
		a.waitReady(t, true, "the card inserted into reader 1")
		to := cardSlot(t, card)
		if to == from {
			t.Fatalf("the card is in slot %d in reader 1 as in reader 0: the test shows nothing", to)
		}
		a.signVerified(t, card)
		checkNoPINSpent(t, card)
		t.Logf("the card moved from slot %d to slot %d; served again", from, to)
		// Straight back into reader 0, without waiting to see it out: the
		// slot check sees the old slot empty, the token is found again.
		card.InsertInto(t, 0)
		deadline := time.Now().Add(5 * time.Second)
		for {
			if slot, ok := cardSlotNow(card); ok && slot == from && a.ready(t) {
				if _, err := a.sign(); err == nil {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the card moved back to reader 0 was not served within 5 s:\n%s", a.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		a.signVerified(t, card)
		checkNoPINSpent(t, card)
	})

	t.Run("pcscd stopped and started: not ready while down, served again", func(t *testing.T) {
		card.StopPCSCD(t)
		down := a.waitReady(t, false, "pcscd stopped")
		// Not ready for as long as it is down, not for a moment only.
		time.Sleep(time.Second)
		if a.ready(t) {
			t.Fatalf("/readyz says ready while pcscd is down:\n%s", a.logs.String())
		}
		if _, err := a.sign(); !isTokenNotReady(err) {
			t.Fatalf("a signature while pcscd is down: %v, want 503 token_not_ready", err)
		}
		start := time.Now()
		card.StartPCSCD(t)
		up := a.waitReady(t, true, "pcscd started")
		t.Logf("pcscd stopped: /readyz 503 after %v; started: 200 after %v (%v after its socket took connections)",
			down.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), up.Round(time.Millisecond))
		a.signVerified(t, card)
		checkNoPINSpent(t, card)
		if up > 2*time.Second {
			t.Errorf("the issue asks for 2 s after pcscd's return: %v", up)
		}
	})

	t.Run("removed in the middle of a signature: 503 at once, nothing retried", func(t *testing.T) {
		card.SetSignDelay(t, 6*time.Second)
		defer card.SetSignDelay(t, 0)
		var wg sync.WaitGroup
		var err error
		var took time.Duration
		from := len(card.BridgeLog(t))
		start := time.Now()
		wg.Go(func() {
			_, err = a.sign()
			took = time.Since(start)
		})
		// The signature is at the card once the bridge logged its block.
		waitLog(t, card, from, "APDU 00 42 00 00", 5*time.Second)
		removed := time.Now()
		card.Remove(t)
		wg.Wait()
		after := time.Since(removed)
		if !isTokenNotReady(err) {
			t.Fatalf("the caller whose signature the removal broke got %v, want 503 token_not_ready", err)
		}
		t.Logf("removed in the middle of a signature: the caller answered %v after the removal (%v in all)",
			after.Round(time.Millisecond), took.Round(time.Millisecond))
		// Half the card's 6 s: room for a loaded machine, far from waiting
		// for the card to finish.
		if after > 3*time.Second {
			t.Errorf("the caller waited %v after the removal; want at once", after)
		}
		if a.ready(t) {
			t.Error("/readyz says ready with the card out")
		}
		card.Insert(t)
		a.waitReady(t, true, "the card reinserted")
		a.signVerified(t, card)
		checkNoPINSpent(t, card)
	})

	t.Run("reset by another process while logged in: the next signature succeeds", func(t *testing.T) {
		a.signVerified(t, card)
		before := strings.Count(card.BridgeLog(t), "-> 6982")
		cmd := exec.Command("opensc-tool", "--reader", "0", "--reset")
		cmd.Env = append(os.Environ(), card.Env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("opensc-tool --reset: %v\n%s", err, out)
		}
		a.signVerified(t, card)
		// OpenSC met 6982 and logged in again with the PIN it holds, once.
		if n := strings.Count(card.BridgeLog(t), "-> 6982") - before; n > 1 {
			t.Errorf("the card answered 6982 %d times after the reset", n)
		}
		checkNoPINSpent(t, card)
		if !a.ready(t) {
			t.Error("not ready after the reset")
		}
	})

	t.Run("another process signs on the card in a loop meanwhile: both succeed", func(t *testing.T) {
		dir := t.TempDir()
		data := filepath.Join(dir, "data")
		if err := os.WriteFile(data, []byte("signed by another process\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
		defer halt() // also when a signature fails
		// The two sign side by side until each has signed three times (30 s
		// at most): both sign, neither waits for the other to finish.
		var other atomic.Int64
		var otherErr atomic.Pointer[error]
		wg.Go(func() {
			missed := 0
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sig := filepath.Join(dir, "sig"+strconv.Itoa(i))
				// The PIN on the command line is the rig's test PIN.
				cmd := exec.Command("pkcs11-tool", "--module", card.Module, "--token-label", card.Label, "--login", "--pin", card.PIN,
					"--sign", "--id", "0001", "-m", "SHA256-RSA-PKCS", "-i", data, "-o", sig)
				cmd.Env = append(os.Environ(), card.Env...)
				out, err := cmd.CombinedOutput()
				if err != nil && strings.Contains(string(out), "No slot with token named") && missed < 5 {
					// OpenSC in pkcs11-tool lists no token when its
					// SCardStatus meets the agent's transaction
					// (SCARD_E_NOT_TRANSACTED in pcscd's log): once in CI
					// under load. That is pkcs11-tool's miss, not the
					// agent's; a few are allowed, not a run of them.
					missed++
					continue
				}
				if err != nil {
					err = fmt.Errorf("pkcs11-tool --sign, after %d: %v\n%s", other.Load(), err, out)
					otherErr.Store(&err)
					return
				}
				other.Add(1)
			}
		})
		var mine int64
		start := time.Now()
		for (mine < 3 || other.Load() < 3) && otherErr.Load() == nil && time.Since(start) < 30*time.Second {
			a.signVerified(t, card)
			mine++
		}
		halt()
		if err := otherErr.Load(); err != nil {
			t.Fatal(*err)
		}
		t.Logf("in %v: %d signatures through the agent, %d by pkcs11-tool beside it", time.Since(start).Round(time.Millisecond), mine, other.Load())
		if other.Load() < 3 || mine < 3 {
			t.Fatalf("%d signatures by pkcs11-tool, %d through the agent in 30 s: want both signing", other.Load(), mine)
		}
		checkNoPINSpent(t, card)
	})
}

// cardSlot is the slot in which OpenSC, in this process, shows the card.
func cardSlot(t *testing.T, card *pkcs11test.Card) uint {
	t.Helper()
	slot, ok := cardSlotNow(card)
	if !ok {
		toks, err := pkcs11.ListTokens(context.Background(), card.Module)
		t.Fatalf("OpenSC does not show the one card %q: %+v %v", card.Label, toks, err)
	}
	return slot
}

// cardSlotNow is the slot of the one token labelled as card, if there is one.
func cardSlotNow(card *pkcs11test.Card) (uint, bool) {
	toks, err := pkcs11.ListTokens(context.Background(), card.Module)
	if err != nil || len(toks) != 1 || toks[0].Label != card.Label {
		return 0, false
	}
	return toks[0].Slot, true
}

// isTokenNotReady reports whether err is the agent's 503 token_not_ready.
func isTokenNotReady(err error) bool {
	var e *agentclient.Error
	return errors.As(err, &e) && e.Status == 503 && e.Body.Code == agentapi.CodeTokenNotReady
}

// waitLog waits until the bridge's log past from holds s.
func waitLog(t *testing.T, card *pkcs11test.Card, from int, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(card.BridgeLog(t)[from:], s) {
		if time.Now().After(deadline) {
			t.Fatalf("the bridge did not log %q within %v", s, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCardAgentPIN: a PIN the card refuses (63C2) is sent once and never
// again, at start and when the card comes back; a blocked PIN (6983) is
// one clear line and no further try.
func TestCardAgentPIN(t *testing.T) {
	card := pkcs11test.NewCard(t, pkcs11test.CardOptions{LogAPDUs: true})
	wrong := filepath.Join(t.TempDir(), "pin")
	if err := os.WriteFile(wrong, []byte("654321\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("started with a wrong PIN: refused once, not retried", func(t *testing.T) {
		for range 2 {
			_, err := startCardAgent(t, card, wrong)
			if err == nil || !strings.Contains(err.Error(), "rejected the PIN") {
				t.Fatalf("start with a wrong PIN: %v, want the PIN refused", err)
			}
			t.Logf("start: %v", err)
		}
		// The second start in this process did not send it again.
		if n, w := card.TriesLeft(t), wrongPINs(t, card); n != 2 || w != 1 {
			t.Fatalf("after two starts with a wrong PIN the card has %d tries left (want 2), was sent %d wrong PINs (want 1)", n, w)
		}
	})

	t.Run("a PIN refused when the card comes back is not retried", func(t *testing.T) {
		pin := filepath.Join(t.TempDir(), "pin")
		if err := os.WriteFile(pin, []byte(card.PIN+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := startCardAgent(t, card, pin)
		if err != nil {
			t.Fatal(err)
		}
		defer a.shutdown()
		if n := card.TriesLeft(t); n != 3 {
			t.Fatalf("the right PIN left %d tries, want 3", n)
		}
		// The card comes back with a PIN the file no longer holds (as if
		// changed elsewhere): the reconnect sends it once.
		card.Remove(t)
		a.waitReady(t, false, "the card removed")
		if err := os.WriteFile(pin, []byte("111111\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		before := wrongPINs(t, card)
		card.Insert(t)
		deadline := time.Now().Add(5 * time.Second)
		for wrongPINs(t, card) == before {
			if time.Now().After(deadline) {
				t.Fatalf("the agent did not try the card again within 5 s:\n%s", a.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // two token checks, several reconnect periods
		if n, w := card.TriesLeft(t), wrongPINs(t, card)-before; n != 2 || w != 1 {
			t.Fatalf("the card has %d tries left (want 2) and was sent %d wrong PINs after its return (want 1)", n, w)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := a.c.Ready(ctx)
		if err == nil || !st.Token.PINRejected {
			t.Fatalf("/readyz: %v, token %+v; want 503 with the PIN refused", err, st.Token)
		}
		if _, err := a.sign(); !isTokenNotReady(err) {
			t.Fatalf("a signature with the PIN refused: %v, want 503 token_not_ready", err)
		}
		if n := strings.Count(a.logs.String(), "refused the PIN; not retrying"); n != 1 {
			t.Errorf("the log says %d times that the PIN was refused, want once:\n%s", n, a.logs.String())
		}
		// Fixed and reloaded (SIGHUP): served again, the count back to 3.
		if err := os.WriteFile(pin, []byte(card.PIN+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := a.d.Reload(a.cfg); err != nil {
			t.Fatal(err)
		}
		a.waitReady(t, true, "the PIN fixed")
		a.signVerified(t, card)
		if n := card.TriesLeft(t); n != 3 {
			t.Fatalf("the right PIN left %d tries, want 3", n)
		}
	})

	t.Run("blocked: one clear line, no further try", func(t *testing.T) {
		// Another process spends every try.
		for range 3 {
			cmd := exec.Command("pkcs11-tool", "--module", card.Module, "--token-label", card.Label, "--login", "--pin", "999999", "--list-objects")
			cmd.Env = append(os.Environ(), card.Env...)
			cmd.CombinedOutput()
		}
		if n := card.TriesLeft(t); n != 0 {
			t.Fatalf("the card has %d tries left after three wrong PINs, want 0 (blocked)", n)
		}
		blocked := func() int { return strings.Count(card.BridgeLog(t), "APDU 00 20 00 00 (13 bytes) -> 6983") }
		before := blocked()
		_, err := startCardAgent(t, card, "")
		if err == nil {
			t.Fatal("the agent started on a blocked card")
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, "PIN is locked") || !strings.Contains(msg, "unblock") {
			t.Fatalf("start on a blocked card: %q, want one line saying the PIN is locked and how to unblock it", msg)
		}
		t.Logf("start on a blocked card: %s", msg)
		time.Sleep(time.Second)
		if n := blocked() - before; n > 1 {
			t.Fatalf("the agent sent the PIN %d times to a blocked card", n)
		}
	})
}

// TestCardAgentLoginFailure: a card whose wrong PIN OpenSC reports as
// CKR_GENERAL_ERROR (libcacard's own 6985) is sent that PIN once, at
// start and when it comes back, never again: a general failure of C_Login
// is not a token gone away (the agent sent it every second before).
func TestCardAgentLoginFailure(t *testing.T) {
	card := pkcs11test.NewCard(t, pkcs11test.CardOptions{LibcacardWords: true, LogAPDUs: true})
	// A VERIFY with a PIN in it (8 bytes, padded).
	verifies := func() int { return strings.Count(card.BridgeLog(t), "APDU 00 20 00 00 (13 bytes)") }
	pin := filepath.Join(t.TempDir(), "pin")
	if err := os.WriteFile(pin, []byte("654321\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := verifies()
	if _, err := startCardAgent(t, card, pin); err == nil || !strings.Contains(err.Error(), "CKR_GENERAL_ERROR") {
		t.Fatalf("start with a PIN the card answers 6985: %v, want the login's failure", err)
	} else {
		t.Logf("start: %v", err)
	}
	if n := verifies() - before; n != 1 {
		t.Fatalf("the card was sent %d PINs at start, want 1", n)
	}

	if err := os.WriteFile(pin, []byte(card.PIN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := startCardAgent(t, card, pin)
	if err != nil {
		t.Fatal(err)
	}
	card.Remove(t)
	a.waitReady(t, false, "the card removed")
	if err := os.WriteFile(pin, []byte("111111\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before = verifies()
	card.Insert(t)
	deadline := time.Now().Add(5 * time.Second)
	for verifies() == before {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not try the card again within 5 s:\n%s", a.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // several reconnect periods
	if n := verifies() - before; n != 1 {
		t.Fatalf("the card was sent %d PINs after its return, want 1:\n%s", n, a.logs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := a.c.Ready(ctx); err == nil || !st.Token.PINRejected {
		t.Fatalf("/readyz: %v, token %+v; want 503 with the PIN not sent again", err, st.Token)
	}
}

// TestCardAgentNoPCSCD: started while pcscd is not running (no reader at
// all), the agent starts not ready, /readyz and a signature say why in one
// line (no reader, pcscd), and it serves once pcscd is back; no PIN is
// sent meanwhile.
func TestCardAgentNoPCSCD(t *testing.T) {
	card := pkcs11test.NewCard(t, pkcs11test.CardOptions{LogAPDUs: true})
	card.StopPCSCD(t)
	start := time.Now()
	a, err := startCardAgent(t, card, "")
	if err != nil {
		t.Fatalf("start without pcscd: %v, want started and waiting for the token", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("start without pcscd took %v", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := a.c.Ready(ctx)
	if err == nil || st.Token.Ready || strings.Contains(st.Token.Reason, "\n") || !strings.Contains(st.Token.Reason, "pcscd") {
		t.Fatalf("/readyz without pcscd: %v, token %+v; want 503 with one line naming pcscd", err, st.Token)
	}
	t.Logf("/readyz without pcscd: %s", st.Token.Reason)
	if _, err := a.sign(); !isTokenNotReady(err) || !strings.Contains(err.Error(), "no reader") {
		t.Fatalf("a signature without pcscd: %v, want 503 token_not_ready saying there is no reader", err)
	}
	card.StartPCSCD(t)
	a.waitReady(t, true, "pcscd started")
	a.signVerified(t, card)
	if n := strings.Count(card.BridgeLog(t), "APDU 00 20 00 00 (13 bytes)"); n != 1 {
		t.Fatalf("the card was sent the PIN %d times, want once (when it was found)", n)
	}
	checkNoPINSpent(t, card)
}

// TestCardAgentSlow: a card 300 ms a signature, many callers at once.
// Those the queue cannot serve within the request deadline get 504
// token_timeout at their deadline, not later, and /readyz stays 200: the
// card is slow, not gone. A signature that outlasts --token-timeout
// answers at that bound and marks the token not ready until it answers
// again (docs/agent.md, token recovery); no PIN is spent.
func TestCardAgentSlow(t *testing.T) {
	const (
		sign     = 300 * time.Millisecond
		tokenTO  = 1500 * time.Millisecond
		deadline = 2500 * time.Millisecond
		callers  = 12 // 3.6 s of signatures: more than one deadline's worth
	)
	card := pkcs11test.NewCard(t, pkcs11test.CardOptions{LogAPDUs: true})
	a, err := startCardAgent(t, card, "", func(c *agent.Config) { c.Token.Timeout, c.RequestDeadline = tokenTO, deadline })
	if err != nil {
		t.Fatal(err)
	}
	a.waitReady(t, true, "started")
	card.SetSignDelay(t, sign)

	t.Run("the queue: served or 504 at the deadline, /readyz 200 throughout", func(t *testing.T) {
		stop := make(chan struct{})
		var polls, notReady int
		var pollErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := a.c.Ready(ctx)
				cancel()
				polls++
				var e *agentclient.Error
				if errors.As(err, &e) && e.Status == 503 {
					notReady++
				} else if err != nil {
					pollErr = err
				}
			}
		})
		type answer struct {
			err  error
			took time.Duration
		}
		answers := make([]answer, callers)
		var callersWG sync.WaitGroup
		start := time.Now()
		for i := range callers {
			callersWG.Go(func() {
				_, err := a.sign()
				answers[i] = answer{err, time.Since(start)}
			})
		}
		callersWG.Wait()
		close(stop)
		wg.Wait()
		var ok, late int
		var longest time.Duration
		for _, an := range answers {
			var e *agentclient.Error
			switch {
			case an.err == nil:
				ok++
			case errors.As(an.err, &e) && e.Status == 504 && e.Body.Code == agentapi.CodeTokenTimeout:
				late++
			default:
				t.Errorf("a caller got %v, want a signature or 504 token_timeout", an.err)
			}
			longest = max(longest, an.took)
		}
		t.Logf("%d callers on a card %v a signature, deadline %v: %d signed, %d 504 token_timeout; the last answered after %v; /readyz asked %d times",
			callers, sign, deadline, ok, late, longest.Round(time.Millisecond), polls)
		if ok == 0 || late == 0 {
			t.Errorf("%d signed and %d timed out; want both (%d signatures of %v cannot all fit in %v)", ok, late, callers, sign, deadline)
		}
		if longest > deadline+2*time.Second {
			t.Errorf("a caller waited %v, past its deadline of %v", longest, deadline)
		}
		if pollErr != nil || notReady > 0 {
			t.Errorf("/readyz while the card was merely slow: %d of %d answers 503, error %v\n%s", notReady, polls, pollErr, a.logs.String())
		}
		a.signVerified(t, card) // the queue drained: the next caller is served
	})

	t.Run("a signature past --token-timeout: answered at the bound, not ready until the card answers", func(t *testing.T) {
		card.SetSignDelay(t, tokenTO+1500*time.Millisecond)
		start := time.Now()
		_, err := a.sign()
		took := time.Since(start)
		var e *agentclient.Error
		if !errors.As(err, &e) || (e.Status != 503 && e.Status != 504) {
			t.Fatalf("a signature past --token-timeout: %v, want 503 or 504", err)
		}
		t.Logf("a signature past --token-timeout (%v): %d %s after %v", tokenTO, e.Status, e.Body.Code, took.Round(time.Millisecond))
		if took > deadline+time.Second {
			t.Fatalf("the caller waited %v", took)
		}
		if e.Status == 503 && a.ready(t) {
			t.Errorf("/readyz says ready after the token did not answer within --token-timeout")
		}
		card.SetSignDelay(t, sign)
		a.waitReady(t, true, "the card answering again")
		a.signVerified(t, card)
		checkNoPINSpent(t, card)
	})
}

// BenchmarkCardSignRate: signatures per second on the card, one after
// another, at its native speed and as a card 300 ms slow: through the
// agent, by the pkcs11 package in this process (the card's own rate), and
// by pkcs11-tool (a process each, as the peer); same run.
//
//	go test -run '^$' -bench CardSignRate -benchtime 1x ./agent
func BenchmarkCardSignRate(b *testing.B) {
	card := pkcs11test.NewCard(b, pkcs11test.CardOptions{})
	a, err := startCardAgent(b, card, "")
	if err != nil {
		b.Fatal(err)
	}
	k, err := pkcs11.Open(context.Background(), card.Selection(), zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	data := filepath.Join(b.TempDir(), "data")
	if err := os.WriteFile(data, []byte("signed by pkcs11-tool\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	rate := func(n int, sign func() error) float64 {
		start := time.Now()
		for range n {
			if err := sign(); err != nil {
				b.Fatal(err)
			}
		}
		return float64(n) / time.Since(start).Seconds()
	}
	for b.Loop() {
		for _, c := range []struct {
			name  string
			delay time.Duration
			n     int
		}{{"native", 0, 40}, {"300ms", 300 * time.Millisecond, 10}} {
			card.SetSignDelay(b, c.delay)
			h := sha256.Sum256([]byte("signed in this process"))
			own := rate(c.n, func() error { _, err := k.Sign(rand.Reader, h[:], crypto.SHA256); return err })
			agentRate := rate(c.n, func() error { _, err := a.sign(); return err })
			tool := rate(c.n, func() error {
				// The PIN on the command line is the rig's test PIN.
				cmd := exec.Command("pkcs11-tool", "--module", card.Module, "--token-label", card.Label, "--login", "--pin", card.PIN,
					"--sign", "--id", "0001", "-m", "SHA256-RSA-PKCS", "-i", data, "-o", os.DevNull)
				cmd.Env = append(os.Environ(), card.Env...)
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("pkcs11-tool: %v: %s", err, out)
				}
				return nil
			})
			b.ReportMetric(agentRate, "agent-sig/s-"+c.name)
			b.ReportMetric(own, "card-sig/s-"+c.name)
			b.ReportMetric(tool, "pkcs11tool-sig/s-"+c.name)
			b.ReportMetric(agentRate/own, "agent/card-"+c.name)
			b.ReportMetric(agentRate/tool, "agent/pkcs11tool-"+c.name)
		}
		card.SetSignDelay(b, 0)
	}
}
