package pkcs11test_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
)

// TestCard runs the card rig through the stack a real card goes through:
// pkcs11-tool and, in this process, OpenSC loaded by the pkcs11 package,
// both over the rig's pcscd.
func TestCard(t *testing.T) {
	card := pkcs11test.NewCard(t, pkcs11test.CardOptions{PIN: "4321", LogAPDUs: true})
	ctx, release, err := pkcs11.ProvisioningContext(card.Module)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	slot := cardSlot(t, ctx, card)

	t.Run("sign with pkcs11-tool, verify with openssl", func(t *testing.T) {
		dir := t.TempDir()
		data, sig := filepath.Join(dir, "data"), filepath.Join(dir, "sig")
		if err := os.WriteFile(data, []byte("signed on the rig's card\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// The PIN on the command line is the rig's test PIN.
		cmd := exec.Command("pkcs11-tool", "--module", card.Module, "--token-label", card.Label, "--login", "--pin", card.PIN,
			"--sign", "--id", "0001", "-m", "SHA256-RSA-PKCS", "-i", data, "-o", sig)
		cmd.Env = append(os.Environ(), card.Env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("pkcs11-tool --sign: %v\n%s", err, out)
		}
		pub := filepath.Join(dir, "cert.pem")
		if err := os.WriteFile(pub, signertest.PEM(card.Cert), 0o600); err != nil {
			t.Fatal(err)
		}
		key, err := exec.Command("openssl", "x509", "-in", pub, "-pubkey", "-noout").Output()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pub, key, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("openssl", "dgst", "-sha256", "-verify", pub, "-signature", sig, data).CombinedOutput(); err != nil {
			t.Fatalf("openssl rejected the card's signature: %v\n%s", err, out)
		}
		if err := os.WriteFile(data, []byte("another text\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("openssl", "dgst", "-sha256", "-verify", pub, "-signature", sig, data).CombinedOutput(); err == nil {
			t.Fatalf("openssl accepted the signature over another text:\n%s", out)
		}
	})

	t.Run("sign through the pkcs11 package", func(t *testing.T) {
		k, err := pkcs11.Open(context.Background(), card.Selection(), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		if !bytes.Equal(k.Certificate().Raw, card.Cert.Raw) {
			t.Fatalf("the key's certificate is %q, not the card's", k.Certificate().Subject)
		}
		h := sha256.Sum256([]byte("signed through the pkcs11 package"))
		sig, err := k.Sign(rand.Reader, h[:], crypto.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		if err := rsa.VerifyPKCS1v15(card.Cert.PublicKey.(*rsa.PublicKey), crypto.SHA256, h[:], sig); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the card's certificate is the rig's", func(t *testing.T) {
		sh := session(t, ctx, slot, "")
		if err := ctx.FindObjectsInit(sh, []*p11.Attribute{
			p11.NewAttribute(p11.CKA_CLASS, p11.CKO_CERTIFICATE), p11.NewAttribute(p11.CKA_ID, card.KeyID)}); err != nil {
			t.Fatal(err)
		}
		objs, _, err := ctx.FindObjects(sh, 2)
		ctx.FindObjectsFinal(sh)
		if err != nil || len(objs) != 1 {
			t.Fatalf("certificates with ID %x: %d, %v", card.KeyID, len(objs), err)
		}
		a, err := ctx.GetAttributeValue(sh, objs[0], []*p11.Attribute{p11.NewAttribute(p11.CKA_VALUE, nil), p11.NewAttribute(p11.CKA_LABEL, nil)})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a[0].Value, card.Cert.Raw) || string(a[1].Value) != card.KeyLabel {
			t.Fatalf("the card's certificate %q is not the rig's %q", a[1].Value, card.Cert.Subject)
		}
	})

	t.Run("reset by another process: 6982, then OpenSC logs in again", func(t *testing.T) {
		sh := session(t, ctx, slot, card.PIN)
		signIn(t, ctx, sh, card)
		cmd := exec.Command("opensc-tool", "--reader", "0", "--reset")
		cmd.Env = append(os.Environ(), card.Env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("opensc-tool --reset: %v\n%s", err, out)
		}
		before := strings.Count(card.BridgeLog(t), "-> 6982")
		signIn(t, ctx, sh, card)
		if after := strings.Count(card.BridgeLog(t), "-> 6982"); after != before+1 {
			t.Fatalf("the card answered 6982 %d times to the signature after the reset, want once", after-before)
		}
	})

	t.Run("a slow card", func(t *testing.T) {
		sh := session(t, ctx, slot, card.PIN)
		start := time.Now()
		signIn(t, ctx, sh, card)
		fast := time.Since(start)
		card.SetSignDelay(t, 300*time.Millisecond)
		start = time.Now()
		signIn(t, ctx, sh, card)
		slow := time.Since(start)
		card.SetSignDelay(t, 0)
		t.Logf("a signature: %v, with a 300 ms card: %v", fast.Round(time.Millisecond), slow.Round(time.Millisecond))
		if slow < 300*time.Millisecond || slow > fast+2*time.Second {
			t.Fatalf("a signature on a card 300 ms slow took %v (%v at full speed)", slow, fast)
		}
	})

	t.Run("removal seen by C_GetSlotInfo", func(t *testing.T) {
		for _, want := range []bool{false, true} {
			start := time.Now()
			if want {
				card.Insert(t)
			} else {
				card.Remove(t)
			}
			waitPresent(t, ctx, slot, want, 2*time.Second)
			t.Logf("present=%v seen after %v", want, time.Since(start).Round(time.Millisecond))
		}
	})

	t.Run("pcscd stopped and started", func(t *testing.T) {
		start := time.Now()
		card.StopPCSCD(t)
		waitPresent(t, ctx, slot, false, 2*time.Second)
		t.Logf("pcscd stopped: card seen gone after %v", time.Since(start).Round(time.Millisecond))
		start = time.Now()
		card.StartPCSCD(t)
		// Right after pcscd's return OpenSC may answer C_GetSlotInfo from
		// before; the slot list is asked anew.
		deadline := time.Now().Add(5 * time.Second)
		for {
			slots, err := ctx.GetSlotList(true)
			if err == nil && len(slots) == 1 && slots[0] == slot {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("OpenSC in this process did not list the card within 5 s of pcscd's return: %v %v", slots, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		waitPresent(t, ctx, slot, true, 2*time.Second)
		sh := session(t, ctx, slot, card.PIN)
		signIn(t, ctx, sh, card)
		t.Logf("pcscd started: a signature in this process after %v", time.Since(start).Round(time.Millisecond))
	})

	t.Run("wrong PIN", func(t *testing.T) {
		sh := session(t, ctx, slot, "")
		for want := 2; want >= 0; want-- {
			if err := ctx.Login(sh, p11.CKU_USER, "9999"); !isCKR(err, p11.CKR_PIN_INCORRECT) {
				t.Fatalf("a wrong PIN: %v, want CKR_PIN_INCORRECT", err)
			}
			if got := card.TriesLeft(t); got != want {
				t.Fatalf("tries left after a wrong PIN: %d, want %d", got, want)
			}
			// OpenSC keeps what the card said (63Cx) for C_GetTokenInfo.
			ti, err := ctx.GetTokenInfo(slot)
			if err != nil {
				t.Fatal(err)
			}
			final, locked := ti.Flags&p11.CKF_USER_PIN_FINAL_TRY != 0, ti.Flags&p11.CKF_USER_PIN_LOCKED != 0
			if final != (want == 1) || locked != (want == 0) {
				t.Fatalf("with %d tries left the token says final try %v, locked %v", want, final, locked)
			}
			if want == 2 {
				// A right PIN sets the count back.
				if err := ctx.Login(sh, p11.CKU_USER, card.PIN); err != nil {
					t.Fatalf("the right PIN: %v", err)
				}
				ctx.Logout(sh)
				if got := card.TriesLeft(t); got != 3 {
					t.Fatalf("tries left after the right PIN: %d, want 3", got)
				}
				if err := ctx.Login(sh, p11.CKU_USER, "9999"); !isCKR(err, p11.CKR_PIN_INCORRECT) {
					t.Fatalf("a wrong PIN: %v, want CKR_PIN_INCORRECT", err)
				}
			}
		}
		// Blocked: even the right PIN is refused.
		if err := ctx.Login(sh, p11.CKU_USER, card.PIN); !isCKR(err, p11.CKR_PIN_LOCKED) {
			t.Fatalf("the right PIN on a blocked card: %v, want CKR_PIN_LOCKED", err)
		}
	})
}

// session opens a session on slot, logged in with pin unless it is empty,
// and closes it when the test ends.
func session(t *testing.T, ctx *p11.Ctx, slot uint, pin string) p11.SessionHandle {
	t.Helper()
	sh, err := ctx.OpenSession(slot, p11.CKF_SERIAL_SESSION)
	if err != nil {
		t.Fatalf("C_OpenSession: %v", err)
	}
	t.Cleanup(func() { ctx.CloseSession(sh) })
	if pin != "" {
		if err := ctx.Login(sh, p11.CKU_USER, pin); err != nil {
			t.Fatalf("C_Login: %v", err)
		}
		t.Cleanup(func() { ctx.Logout(sh) })
	}
	return sh
}

// signIn signs in session sh with the card's first key and checks the
// signature against the card's certificate.
func signIn(t *testing.T, ctx *p11.Ctx, sh p11.SessionHandle, card *pkcs11test.Card) {
	t.Helper()
	if err := ctx.FindObjectsInit(sh, []*p11.Attribute{
		p11.NewAttribute(p11.CKA_CLASS, p11.CKO_PRIVATE_KEY), p11.NewAttribute(p11.CKA_ID, card.KeyID)}); err != nil {
		t.Fatal(err)
	}
	keys, _, err := ctx.FindObjects(sh, 2)
	ctx.FindObjectsFinal(sh)
	if err != nil || len(keys) != 1 {
		t.Fatalf("private keys with ID %x: %d, %v", card.KeyID, len(keys), err)
	}
	msg := []byte("signed in this process")
	if err := ctx.SignInit(sh, []*p11.Mechanism{p11.NewMechanism(p11.CKM_SHA256_RSA_PKCS, nil)}, keys[0]); err != nil {
		t.Fatal(err)
	}
	sig, err := ctx.Sign(sh, msg)
	if err != nil {
		t.Fatalf("C_Sign: %v", err)
	}
	h := sha256.Sum256(msg)
	if err := rsa.VerifyPKCS1v15(card.Cert.PublicKey.(*rsa.PublicKey), crypto.SHA256, h[:], sig); err != nil {
		t.Fatalf("the card's signature does not verify with its certificate: %v", err)
	}
}

// cardSlot is the slot of the rig's card, found by its label.
func cardSlot(t *testing.T, ctx *p11.Ctx, card *pkcs11test.Card) uint {
	t.Helper()
	slots, err := ctx.GetSlotList(true)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if ti, err := ctx.GetTokenInfo(s); err == nil && ti.Label == card.Label && ti.SerialNumber == card.Serial {
			return s
		}
	}
	t.Fatalf("OpenSC in this process shows no token %q in %d slots", card.Label, len(slots))
	return 0
}

// waitPresent waits until C_GetSlotInfo, the one call OpenSC answers by
// asking the reader, says the card is in (or out).
func waitPresent(t *testing.T, ctx *p11.Ctx, slot uint, present bool, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		si, err := ctx.GetSlotInfo(slot)
		if err != nil && present {
			t.Fatalf("C_GetSlotInfo: %v", err)
		}
		if err != nil || si.Flags&p11.CKF_TOKEN_PRESENT != 0 == present {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("C_GetSlotInfo did not see the card present=%v within %v", present, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isCKR(err error, code uint) bool {
	e, ok := err.(p11.Error)
	return ok && uint(e) == code
}
