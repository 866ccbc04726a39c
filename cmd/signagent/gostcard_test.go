package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
)

// The command line and the agent on the GOST card rig: a Rutoken ECP of
// the project's own behind pcscd, driven by OpenSC's rutoken_ecp driver
// (opensc-pkcs11.so), which offers only the raw CKM_GOSTR3410 and shows no
// GOST-2012 certificate: signagent hashes with Streebog-256 and takes the
// certificate (issued by a test CA for the card's key) from a file.

// gostCardRig starts a GOST card with a certificate for its key in a file.
type gostCardRig struct {
	card     *pkcs11test.GOSTCard
	certFile string
	thumb    string
	pem      string
	der      []byte
}

func newGOSTCardRig(t *testing.T, o pkcs11test.GOSTCardOptions) *gostCardRig {
	t.Helper()
	o.ForProcesses = true // the commands are processes, given r.env
	card := pkcs11test.NewGOSTCard(t, o)
	file, cert := pkcs11test.GOSTCertificateFor(t, card.PublicKey, "partner's GOST card")
	return &gostCardRig{card: card, certFile: file, thumb: canonical.ThumbprintOf(cert), pem: string(signertest.PEM(cert)), der: cert.Raw}
}

// args select the card's key with pinFile and the certificate file.
func (r *gostCardRig) args(pinFile string) []string {
	return []string{"--module", r.card.Module, "--token-label", r.card.Label, "--key-label", r.card.KeyLabel,
		"--pin-file", pinFile, "--certificate-file", r.certFile}
}

// env is the environment of a command on the card: the rig's pcscd.
func (r *gostCardRig) env(extra ...string) []string {
	return append(append([]string{"SIGNAGENT_API_KEY=" + testAPIKey}, r.card.Env...), extra...)
}

// wrongPINs counts the wrong PINs the card answered 6300 to.
func (r *gostCardRig) wrongPINs(t *testing.T) int {
	return strings.Count(r.card.BridgeLog(t), "[8 bytes hidden] -> 6300")
}

func (r *gostCardRig) noPINSpent(t *testing.T) {
	t.Helper()
	if n, w := r.card.TriesLeft(t), r.wrongPINs(t); n != pkcs11test.GOSTCardTries || w != 0 {
		t.Fatalf("the card has %d PIN tries left (want %d), was sent %d wrong PINs (want 0)", n, pkcs11test.GOSTCardTries, w)
	}
}

// verifyCMS checks a CMS of the card with OpenSSL's gost engine and GnuTLS.
func (r *gostCardRig) verifyCMS(t *testing.T, der, content []byte) {
	t.Helper()
	if ok, out := signertest.OpenSSLVerifyGOST(t, der, content, nil); !ok {
		t.Fatalf("openssl cms -verify -engine gost rejected the card's CMS:\n%s", out)
	}
	if !strings.Contains(string(der), "\x06\x08\x2a\x85\x03\x07\x01\x01\x03\x02") {
		t.Fatal("the CMS does not name id-tc26-signwithdigest-gost3410-12-256")
	}
}

// TestGOSTCardCLI: sign, session and token check on the GOST card.
func TestGOSTCardCLI(t *testing.T) {
	r := newGOSTCardRig(t, pkcs11test.GOSTCardOptions{LogAPDUs: true})

	t.Run("sign: OpenSSL's gost engine verifies the CMS", func(t *testing.T) {
		dir := t.TempDir()
		sig, text := filepath.Join(dir, "sig.der"), filepath.Join(dir, "text")
		cmd := signagent(t, r.env(), append([]string{"trusted", "sign", "--phone", "9161234567", "--out", sig, "--text-out", text}, r.args(r.card.PINFile)...)...)
		before := len(r.card.BridgeLog(t))
		if code, stderr, took := runBinary(t, cmd); code != cmdutil.ExitOK {
			t.Fatalf("sign on the GOST card: exit %d after %v: %s", code, took, stderr)
		}
		// One signature: the card shows its public key, so the
		// certificate is checked against it, not by a signature.
		apdus := r.card.BridgeLog(t)[before:]
		if n := strings.Count(apdus, "APDU 00 2A 9E 9A [32] "); n != 1 {
			t.Fatalf("%d PSO signatures for one sign, want 1:\n%s", n, apdus)
		}
		var sigAPDUs []string // the signature's: VERIFY, the key's SELECT, MSE, PSO, LOGOUT
		for _, l := range strings.Split(apdus, "\n") {
			for _, p := range []string{"APDU 00 20 ", "APDU 00 A4 08 00 [8] 10001000", "APDU 00 22 ", "APDU 00 2A ", "APDU 80 40 "} {
				if strings.Contains(l, p) {
					sigAPDUs = append(sigAPDUs, l[strings.Index(l, "APDU"):])
				}
			}
		}
		t.Logf("the APDUs of the signature of signagent sign on the card:\n%s", strings.Join(sigAPDUs, "\n"))
		der, _ := os.ReadFile(sig)
		content, _ := os.ReadFile(text)
		r.verifyCMS(t, der, content)
	})

	t.Run("session: trusted authentication with the card's key", func(t *testing.T) {
		emu := startEmulator(t, &emulator.Config{
			Partners: []emulator.Partner{{Name: "p", APIKey: testAPIKey, Certificates: []string{r.pem}}},
			Users:    []emulator.User{{ID: "u1", Phone: "9161234567", Linked: []string{"p:crm-42"}}},
		})
		var stdout strings.Builder
		cmd := signagent(t, r.env(), append([]string{"trusted", "session", "--phone", "9161234567", "--service-user-id", "crm-42", "--trusted-url", emu.URL()},
			r.args(r.card.PINFile)...)...)
		cmd.Stdout = &stdout
		if code, stderr, _ := runBinary(t, cmd); code != cmdutil.ExitOK || len(strings.TrimSpace(stdout.String())) != 43 {
			t.Fatalf("session on the GOST card: exit %d, stdout %q: %s", code, stdout.String(), stderr)
		}
	})

	t.Run("token check: the way, the certificate's file, certificate login not offered", func(t *testing.T) {
		code, out, stderr := runTokenCheck(t, r.card.Env, r.args(r.card.PINFile)...)
		if code != 0 {
			t.Fatalf("exit %d: %s\n%s", code, stderr, out)
		}
		wantLines(t, out, `library: "OpenSC smartcard framework"`,
			"key: \""+r.card.KeyLabel+"\" (id 01): GOST 256 CryptoPro-A",
			"thumbprint "+r.thumb+", valid until ", "from "+r.certFile,
			"trusted authentication: yes (GOST 256 CryptoPro-A, Streebog-256 in signagent, then raw CKM_GOSTR3410 on the token)",
			"\ncertificate login: not offered by this token (no GOST key agreement; a vendor module is needed, see docs/tokens.md)\n",
			"result: every function the key allows works")
		t.Logf("\n%s", out)
	})

	t.Run("certificate login asked of the card: not offered, no PIN sent", func(t *testing.T) {
		before := strings.Count(r.card.BridgeLog(t), "APDU 00 20 00 02 [8 bytes hidden]")
		cmd := signagent(t, r.env("SIGNAGENT_DEVELOPER_KEY=testClient-77aa88bb99", "SIGNAGENT_BUSINESS_URL=http://127.0.0.1:9"),
			append([]string{"header", "--scheme", "legacy", "--by", "certificate"}, r.args(r.card.PINFile)...)...)
		code, stderr, _ := runBinary(t, cmd)
		if code == cmdutil.ExitOK {
			t.Fatal("a certificate login on the GOST card succeeded")
		}
		oneLine(t, stderr, "certificate login is not offered by this token (no GOST key agreement; a vendor module is needed, see docs/tokens.md)")
		if n := strings.Count(r.card.BridgeLog(t), "APDU 00 20 00 02 [8 bytes hidden]") - before; n > 1 {
			t.Fatalf("%d PINs sent", n)
		}
	})

	t.Run("a certificate for another key: one line naming both, exit 2", func(t *testing.T) {
		other := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
		args := r.args(r.card.PINFile)
		args[len(args)-1] = other.CertFile()
		cmd := signagent(t, r.env(), append([]string{"trusted", "sign", "--phone", "9161234567", "--format", "base64"}, args...)...)
		code, stderr, _ := runBinary(t, cmd)
		if code != cmdutil.ExitBadInput {
			t.Fatalf("exit %d, want %d: %s", code, cmdutil.ExitBadInput, stderr)
		}
		oneLine(t, stderr, canonical.ThumbprintOf(other.Cert))
		if !strings.Contains(stderr, r.card.KeyLabel) {
			t.Fatalf("the line does not name the card's key: %s", stderr)
		}
	})
	r.noPINSpent(t)
}

// TestGOSTCardCLIPIN: a wrong PIN costs one try (the card answers 6300,
// then 63Cx to the empty VERIFY), a blocked card (6983) is one line and
// is sent the PIN once at most.
func TestGOSTCardCLIPIN(t *testing.T) {
	t.Parallel()
	r := newGOSTCardRig(t, pkcs11test.GOSTCardOptions{LogAPDUs: true})
	wrong := filepath.Join(t.TempDir(), "pin")
	os.WriteFile(wrong, []byte("00000000\n"), 0o600)
	sign := func(pinFile string, extra ...string) (int, string) {
		cmd := signagent(t, r.env(), append(append([]string{"trusted", "sign", "--phone", "9161234567", "--format", "base64"}, r.args(pinFile)...), extra...)...)
		code, stderr, _ := runBinary(t, cmd)
		return code, stderr
	}
	before := len(r.card.BridgeLog(t))
	code, stderr := sign(wrong)
	if code != cmdutil.ExitFailure {
		t.Fatalf("a wrong PIN: exit %d, want 1: %s", code, stderr)
	}
	oneLine(t, stderr, "the token rejected the PIN")
	log := r.card.BridgeLog(t)[before:]
	if !strings.Contains(log, "[8 bytes hidden] -> 6300") || !strings.Contains(log, "APDU 00 20 00 02 -> 63C4") {
		t.Fatalf("the card did not answer 6300 then 63C4:\n%s", log)
	}
	if n, w := r.card.TriesLeft(t), r.wrongPINs(t); n != pkcs11test.GOSTCardTries-1 || w != 1 {
		t.Fatalf("after one run with a wrong PIN: %d tries left, %d wrong PINs sent; want %d and 1", n, w, pkcs11test.GOSTCardTries-1)
	}
	// Spend the rest (the final one only when asked to).
	for i := 0; i < pkcs11test.GOSTCardTries && r.card.TriesLeft(t) > 0; i++ {
		sign(wrong, "--allow-final-pin-try")
	}
	if n := r.card.TriesLeft(t); n != 0 {
		t.Fatalf("%d tries left, want the card blocked", n)
	}
	before = len(r.card.BridgeLog(t))
	code, stderr = sign(r.card.PINFile)
	if code != cmdutil.ExitFailure {
		t.Fatalf("the right PIN on a blocked card: exit %d, want 1: %s", code, stderr)
	}
	oneLine(t, stderr, "PIN is locked")
	log = r.card.BridgeLog(t)[before:]
	if n := strings.Count(log, "[8 bytes hidden]"); n > 1 {
		t.Fatalf("%d PINs sent to a blocked card by one run", n)
	}
	if n := strings.Count(log, "[8 bytes hidden]"); n == 1 && !strings.Contains(log, "-> 6983") {
		t.Fatalf("the blocked card did not answer 6983:\n%s", log)
	}
	t.Logf("blocked: %s", strings.TrimSpace(stderr))
}

// gostAgent starts serve on the card with extra flags.
func (r *gostCardRig) serve(t *testing.T, extra ...string) *agentProc {
	t.Helper()
	sock := filepath.Join(shortDir(t), "a.sock")
	args := append(append([]string{"serve", "--listen", "unix:" + sock, "--audit-log", "-"}, r.args(r.card.PINFile)...), extra...)
	a := startServe(t, signagent(t, r.env(), args...), sock)
	waitFor(t, 20*time.Second, "ready at start", func() bool { code, _ := a.do("GET", "/readyz", ""); return code == 200 })
	return a
}

// signOK asks the agent for a signature and verifies its CMS.
func (r *gostCardRig) signOK(t *testing.T, a *agentProc, what string) {
	t.Helper()
	code, body := a.do("POST", "/v1/signatures", `{"phone":"9161234567"}`)
	if code != 200 {
		t.Fatalf("%s: a signature answered %d %s\n%s", what, code, body, a.stderr.String())
	}
	var resp struct{ Signature, Timestamp, CertificateThumbprint string }
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.CertificateThumbprint != r.thumb {
		t.Fatalf("%s: certificateThumbprint %s, want the file's %s", what, resp.CertificateThumbprint, r.thumb)
	}
	der, err := base64.StdEncoding.DecodeString(resp.Signature)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(der), string(r.der)) {
		t.Fatalf("%s: the CMS does not embed the certificate", what)
	}
}

// TestGOSTCardAgent: serve on the GOST card: the file's certificate in
// /readyz, /v1/signatures and the audit lines; the card removed while idle
// and during a signature, put back; reset by another process; pcscd
// restarted; a 300 ms card with 12 callers.
func TestGOSTCardAgent(t *testing.T) {
	t.Parallel()
	r := newGOSTCardRig(t, pkcs11test.GOSTCardOptions{LogAPDUs: true})
	a := r.serve(t)
	ready := func() bool { code, _ := a.do("GET", "/readyz", ""); return code == 200 }
	r.signOK(t, a, "at start")
	if _, body := a.do("GET", "/readyz", ""); !strings.Contains(body, r.thumb) {
		t.Fatalf("/readyz does not name the file's certificate %s: %s", r.thumb, body)
	}
	if s := a.stderr.String(); !strings.Contains(s, `"keyThumbprint":"`+r.thumb+`"`) || strings.Count(s, "Streebog-256 in signagent, then raw CKM_GOSTR3410 on the token") != 1 {
		t.Fatalf("the audit line names no %s, or the way is not logged once:\n%s", r.thumb, s)
	}

	for _, step := range []struct {
		what          string
		take, putBack func(testing.TB)
	}{
		{"the card removed while idle", r.card.Remove, r.card.Insert},
		{"pcscd stopped", r.card.StopPCSCD, r.card.StartPCSCD},
	} {
		t.Run(step.what, func(t *testing.T) {
			step.take(t)
			out := waitFor(t, 5*time.Second, step.what+": /readyz 503", func() bool { return !ready() })
			if code, body := a.sign(); code != 503 || !strings.Contains(body, `"token_not_ready"`) {
				t.Fatalf("%s: a signature answered %d %s, want 503 token_not_ready", step.what, code, body)
			}
			step.putBack(t)
			in := waitFor(t, 10*time.Second, step.what+", then back: /readyz 200", ready)
			r.signOK(t, a, step.what+", then back")
			t.Logf("%s: /readyz 503 after %v; back: 200 after %v", step.what, out.Round(time.Millisecond), in.Round(time.Millisecond))
		})
	}

	t.Run("the card removed during a signature", func(t *testing.T) {
		r.card.SetSignDelay(t, 3*time.Second)
		psos := func() int { return strings.Count(r.card.BridgeLog(t), "APDU 00 2A 9E 9A") }
		before := psos()
		done := make(chan int, 1)
		go func() { code, _ := a.sign(); done <- code }()
		waitFor(t, 10*time.Second, "the signature sent to the card", func() bool { return psos() > before })
		r.card.Remove(t)
		if code := <-done; code != 503 {
			t.Fatalf("a signature whose card was removed before it answered: HTTP %d, want 503 (the token is not ready)", code)
		}
		r.card.SetSignDelay(t, 0)
		r.card.Insert(t)
		waitFor(t, 10*time.Second, "ready after reinsertion", ready)
		r.signOK(t, a, "after the removal mid-signature")
	})

	t.Run("reset by another process: the next signature succeeds", func(t *testing.T) {
		cmd := exec.Command("opensc-tool", "--reader", "0", "--reset")
		cmd.Env = append(os.Environ(), r.card.Env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("opensc-tool --reset: %v\n%s", err, out)
		}
		r.signOK(t, a, "after the reset")
	})

	t.Run("a 300 ms card with 12 callers", func(t *testing.T) {
		r.card.SetSignDelay(t, 300*time.Millisecond)
		defer r.card.SetSignDelay(t, 0)
		var wg sync.WaitGroup
		codes := make(chan string, 12)
		for range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if code, body := a.sign(); code != 200 {
					codes <- body
				}
			}()
		}
		wg.Wait()
		close(codes)
		for body := range codes {
			t.Errorf("a caller of 12 on a 300 ms card: %s", body)
		}
	})
	r.noPINSpent(t)
	if a.cmd.ProcessState != nil {
		t.Fatalf("serve exited: %s", a.stderr.String())
	}
}

// TestGOSTCardAgentTwoCards: two GOST cards of one label, different
// serials: the agent started on one (by its serial) keeps to it: with its
// card out it is not ready, though the other is in; back, it signs with
// its own certificate again.
func TestGOSTCardAgentTwoCards(t *testing.T) {
	t.Parallel()
	r := newGOSTCardRig(t, pkcs11test.GOSTCardOptions{Serial: "0a0b0c01", LogAPDUs: true})
	two := r.card.AddGOSTCard(t, "0a0b0c02")
	pins := func() int { return strings.Count(two.BridgeLog(t), "[8 bytes hidden]") }
	personalised := pins() // pkcs15-init's
	a := r.serve(t, "--token-serial", r.card.Serial)
	ready := func() bool { code, _ := a.do("GET", "/readyz", ""); return code == 200 }
	r.signOK(t, a, "at start")
	pscos := func() int { return strings.Count(two.BridgeLog(t), "APDU 00 2A 9E 9A") }
	r.card.Remove(t)
	waitFor(t, 5*time.Second, "not ready with its card out", func() bool { return !ready() })
	if code, body := a.sign(); code != 503 {
		t.Fatalf("with its card out and the other in: %d %s, want 503", code, body)
	}
	r.card.Insert(t)
	waitFor(t, 10*time.Second, "ready with its card back", ready)
	r.signOK(t, a, "its card back")
	if n := pscos(); n != 0 {
		t.Fatalf("the other card (serial %s) was asked to sign %d times", two.Serial, n)
	}
	if n := pins() - personalised; n != 0 {
		t.Fatalf("the other card was sent the PIN %d times", n)
	}
}
