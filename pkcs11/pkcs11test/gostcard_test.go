package pkcs11test_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
)

// TestGOSTCard runs the GOST card through OpenSC's rutoken_ecp driver
// behind pcscd: pkcs11-tool and, in this process, opensc-pkcs11.so.
func TestGOSTCard(t *testing.T) {
	card := pkcs11test.NewGOSTCard(t, pkcs11test.GOSTCardOptions{LogAPDUs: true})
	ctx, release, err := pkcs11.ProvisioningContext(card.Module)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	slot := cardSlot(t, ctx, card.Card)

	t.Run("the token offers raw GOSTR3410 only", func(t *testing.T) {
		out := pkcs11Tool(t, card, "-M")
		if !strings.Contains(out, "  GOSTR3410, keySize={256,256}, hw, decrypt, sign, verify\n") {
			t.Fatalf("pkcs11-tool -M lists no GOSTR3410:\n%s", out)
		}
		if strings.Contains(out, "GOSTR3410-WITH-GOSTR3411") || strings.Contains(out, "12_256") {
			t.Fatalf("pkcs11-tool -M lists a hashing GOST mechanism:\n%s", out)
		}
	})

	t.Run("the public key OpenSC shows is the card's", func(t *testing.T) {
		if pub := tokenPublicKey(t, ctx, slot, card); !pub.Equal(card.PublicKey) {
			t.Fatal("CKA_VALUE is not the key the card generated")
		}
		if card.PublicKey.Curve.Name != "CryptoPro-A" {
			t.Fatalf("pkcs15-init -G gost2001 made a key on %s, want CryptoPro-A", card.PublicKey.Curve.Name)
		}
	})

	var apdus string
	t.Run("pkcs11-tool signs a hash, internal/gost and OpenSSL verify", func(t *testing.T) {
		pub := tokenPublicKey(t, ctx, slot, card)
		hash := sha256.Sum256([]byte("signed on the GOST card"))
		before := len(card.BridgeLog(t))
		sig := pkcs11ToolSign(t, card, hash[:])
		apdus = card.BridgeLog(t)[before:]
		if err := gost.Verify(pub, hash[:], sig); err != nil {
			t.Fatalf("internal/gost: %v", err)
		}
		other := hash
		other[0] ^= 1
		if err := gost.Verify(pub, other[:], sig); err == nil {
			t.Fatal("internal/gost accepted the signature over another hash")
		}
		if out, err := openSSLVerifyGOST2001(t, pub, hash[:], sig); err != nil {
			t.Fatalf("OpenSSL's gost engine rejected the card's signature: %v\n%s", err, out)
		}
		if out, err := openSSLVerifyGOST2001(t, pub, other[:], sig); err == nil {
			t.Fatalf("OpenSSL's gost engine accepted the signature over another hash:\n%s", out)
		}
	})
	t.Run("the APDUs of a signature", func(t *testing.T) {
		// What OpenSC sends to sign: the key selected by its path, the
		// security environment, the signature, a logout; the PIN hidden.
		for _, want := range []string{
			"APDU 00 20 00 02 [8 bytes hidden] -> 9000",
			"APDU 00 A4 08 00 [8] 1000100060020001 Le=256 -> 9000",
			"APDU 00 22 41 B6 [3] 840101 -> 9000",
			"APDU 00 2A 9E 9A [32] ",
			"APDU 80 40 00 00 -> 9000",
		} {
			if !strings.Contains(apdus, want) {
				t.Fatalf("the card's log of a signature has no %q:\n%s", want, apdus)
			}
		}
		if !regexp.MustCompile(`APDU 00 2A 9E 9A \[32\] [0-9a-f]{64} Le=\d+ -> 9000 \[64\] [0-9a-f]{128}\n`).MatchString(apdus) {
			t.Fatalf("the card's log has no 64-byte signature:\n%s", apdus)
		}
		if strings.Contains(apdus, hex.EncodeToString([]byte(card.PIN))) {
			t.Fatal("the card logged the PIN")
		}
		t.Logf("the APDUs of one signature:\n%s", apdus)
	})

	t.Run("a signature in this process", func(t *testing.T) {
		sh := session(t, ctx, slot, card.PIN)
		gostSignIn(t, ctx, sh, card)
	})

	t.Run("a slow card", func(t *testing.T) {
		sh := session(t, ctx, slot, card.PIN)
		card.SetSignDelay(t, 300*time.Millisecond)
		defer card.SetSignDelay(t, 0)
		start := time.Now()
		gostSignIn(t, ctx, sh, card)
		// The card waits before it answers: never quicker than that.
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("a signature on a card 300 ms slow took %v", d)
		}
	})

	t.Run("removal and reinsertion", func(t *testing.T) {
		card.Remove(t)
		waitPresent(t, ctx, slot, false, 5*time.Second)
		if _, err := ctx.GetTokenInfo(slot); !isCKR(err, p11.CKR_TOKEN_NOT_PRESENT) {
			t.Fatalf("C_GetTokenInfo with the card out: %v, want CKR_TOKEN_NOT_PRESENT", err)
		}
		card.Insert(t)
		waitPresent(t, ctx, slot, true, 5*time.Second)
		sh := session(t, ctx, slot, card.PIN)
		gostSignIn(t, ctx, sh, card)
	})

	t.Run("the card restarted keeps its key and PIN", func(t *testing.T) {
		card.Restart(t)
		if pub := card.CardPublicKey(t); !pub.Equal(card.PublicKey) {
			t.Fatal("the restarted card has another key")
		}
		waitPresent(t, ctx, slot, true, 5*time.Second)
		sig := pkcs11ToolSign(t, card, make([]byte, 32))
		if err := gost.Verify(card.PublicKey, make([]byte, 32), sig); err != nil {
			t.Fatalf("a signature after the restart: %v", err)
		}
		st, err := os.Stat(filepath.Join(card.Dir, "bridge.state"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("the card's state file has mode %v, want 0600", st.Mode())
		}
	})

	t.Run("wrong PIN: 6300, 63Cx, then blocked", func(t *testing.T) {
		sh := session(t, ctx, slot, "")
		before := len(card.BridgeLog(t))
		if err := ctx.Login(sh, p11.CKU_USER, "00000000"); !isCKR(err, p11.CKR_PIN_INCORRECT) {
			t.Fatalf("a wrong PIN: %v, want CKR_PIN_INCORRECT", err)
		}
		log := card.BridgeLog(t)[before:]
		if !strings.Contains(log, "APDU 00 20 00 02 [8 bytes hidden] -> 6300") || !strings.Contains(log, "APDU 00 20 00 02 -> 63C4") {
			t.Fatalf("a wrong PIN: the card did not answer 6300 then 63C4:\n%s", log)
		}
		if got := card.TriesLeft(t); got != pkcs11test.GOSTCardTries-1 {
			t.Fatalf("tries left after a wrong PIN: %d, want %d", got, pkcs11test.GOSTCardTries-1)
		}
		if err := ctx.Login(sh, p11.CKU_USER, card.PIN); err != nil {
			t.Fatalf("the right PIN: %v", err)
		}
		ctx.Logout(sh)
		if got := card.TriesLeft(t); got != pkcs11test.GOSTCardTries {
			t.Fatalf("tries left after the right PIN: %d, want %d", got, pkcs11test.GOSTCardTries)
		}
		for i := 0; i < pkcs11test.GOSTCardTries; i++ {
			if err := ctx.Login(sh, p11.CKU_USER, "00000000"); !isCKR(err, p11.CKR_PIN_INCORRECT) {
				t.Fatalf("wrong PIN %d: %v, want CKR_PIN_INCORRECT", i+1, err)
			}
		}
		if got := card.TriesLeft(t); got != 0 {
			t.Fatalf("tries left after %d wrong PINs: %d", pkcs11test.GOSTCardTries, got)
		}
		before = len(card.BridgeLog(t))
		if err := ctx.Login(sh, p11.CKU_USER, card.PIN); !isCKR(err, p11.CKR_PIN_LOCKED) {
			t.Fatalf("the right PIN on a blocked card: %v, want CKR_PIN_LOCKED", err)
		}
		if log := card.BridgeLog(t)[before:]; !strings.Contains(log, "-> 6983") {
			t.Fatalf("the blocked card did not answer 6983:\n%s", log)
		}
	})
}

// TestGOSTCardTwo puts two GOST cards of one label into the rig: two slots,
// two serials, two keys.
func TestGOSTCardTwo(t *testing.T) {
	one := pkcs11test.NewGOSTCard(t, pkcs11test.GOSTCardOptions{Serial: "0a0b0c01"})
	two := one.AddGOSTCard(t, "0a0b0c02")
	if one.Label != two.Label || one.Serial == two.Serial || one.PublicKey.Equal(two.PublicKey) {
		t.Fatalf("two cards: labels %q %q, serials %q %q", one.Label, two.Label, one.Serial, two.Serial)
	}
	ctx, release, err := pkcs11.ProvisioningContext(one.Module)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	slots, err := ctx.GetSlotList(true)
	if err != nil || len(slots) != 2 {
		t.Fatalf("slots with a token: %v %v, want 2", slots, err)
	}
	serials := map[string]uint{}
	for _, s := range slots {
		ti, err := ctx.GetTokenInfo(s)
		if err != nil || ti.Label != one.Label {
			t.Fatalf("slot %d: %q %v", s, ti.Label, err)
		}
		serials[ti.SerialNumber] = s
	}
	for _, c := range []*pkcs11test.GOSTCard{one, two} {
		s, ok := serials[c.Serial]
		if !ok {
			t.Fatalf("no slot shows serial %q: %v", c.Serial, serials)
		}
		if pub := tokenPublicKey(t, ctx, s, c); !pub.Equal(c.PublicKey) {
			t.Fatalf("the slot of serial %s shows another card's key", c.Serial)
		}
		gostSignIn(t, ctx, session(t, ctx, s, c.PIN), c)
	}
}

func pkcs11Tool(t testing.TB, card *pkcs11test.GOSTCard, args ...string) string {
	t.Helper()
	cmd := exec.Command("pkcs11-tool", append([]string{"--module", card.Module, "--token-label", card.Label}, args...)...)
	cmd.Env = append(os.Environ(), card.Env...)
	cmd.Env = append(cmd.Env, "SIGNAGENT_RIG_PIN="+card.PIN)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pkcs11-tool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// pkcs11ToolSign signs hash with `pkcs11-tool --login --sign -m GOSTR3410`
// (the PIN from the environment) and returns the signature (s then r).
func pkcs11ToolSign(t testing.TB, card *pkcs11test.GOSTCard, hash []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "hash"), filepath.Join(dir, "sig")
	if err := os.WriteFile(in, hash, 0o600); err != nil {
		t.Fatal(err)
	}
	pkcs11Tool(t, card, "--login", "--pin", "env:SIGNAGENT_RIG_PIN", "--sign", "-m", "GOSTR3410", "--id", "01", "-i", in, "-o", out)
	sig, err := os.ReadFile(out)
	if err != nil || len(sig) != 64 {
		t.Fatalf("pkcs11-tool's signature: %d bytes, %v", len(sig), err)
	}
	return sig
}

// tokenPublicKey reads the key's CKA_VALUE (an OCTET STRING of x||y
// little-endian) and CKA_GOSTR3410_PARAMS through OpenSC.
func tokenPublicKey(t *testing.T, ctx *p11.Ctx, slot uint, card *pkcs11test.GOSTCard) *gost.PublicKey {
	t.Helper()
	sh := session(t, ctx, slot, "")
	obj := findOne(t, ctx, sh, p11.CKO_PUBLIC_KEY, card.KeyID)
	a, err := ctx.GetAttributeValue(sh, obj, []*p11.Attribute{
		p11.NewAttribute(p11.CKA_KEY_TYPE, nil), p11.NewAttribute(p11.CKA_VALUE, nil), p11.NewAttribute(p11.CKA_GOSTR3410_PARAMS, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a[0].Value, []byte{byte(p11.CKK_GOSTR3410), 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("the key type is %x, want CKK_GOSTR3410", a[0].Value)
	}
	var value []byte
	var set asn1.ObjectIdentifier
	if _, err := asn1.Unmarshal(a[1].Value, &value); err != nil {
		t.Fatalf("CKA_VALUE %x: %v", a[1].Value, err)
	}
	if _, err := asn1.Unmarshal(a[2].Value, &set); err != nil {
		t.Fatalf("CKA_GOSTR3410_PARAMS %x: %v", a[2].Value, err)
	}
	curve := gost.CurveByOID(set)
	if curve == nil {
		t.Fatalf("CKA_GOSTR3410_PARAMS %v: no such parameter set", set)
	}
	pub, err := gost.NewPublicKey(curve, value)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func findOne(t *testing.T, ctx *p11.Ctx, sh p11.SessionHandle, class uint, id []byte) p11.ObjectHandle {
	t.Helper()
	if err := ctx.FindObjectsInit(sh, []*p11.Attribute{p11.NewAttribute(p11.CKA_CLASS, class), p11.NewAttribute(p11.CKA_ID, id)}); err != nil {
		t.Fatal(err)
	}
	objs, _, err := ctx.FindObjects(sh, 2)
	ctx.FindObjectsFinal(sh)
	if err != nil || len(objs) != 1 {
		t.Fatalf("objects of class %d with ID %x: %d, %v", class, id, len(objs), err)
	}
	return objs[0]
}

// gostSignIn signs a random hash with raw CKM_GOSTR3410 in session sh and
// verifies the signature with the card's public key.
func gostSignIn(t *testing.T, ctx *p11.Ctx, sh p11.SessionHandle, card *pkcs11test.GOSTCard) {
	t.Helper()
	key := findOne(t, ctx, sh, p11.CKO_PRIVATE_KEY, card.KeyID)
	hash := make([]byte, 32)
	rand.Read(hash)
	if err := ctx.SignInit(sh, []*p11.Mechanism{p11.NewMechanism(p11.CKM_GOSTR3410, nil)}, key); err != nil {
		t.Fatal(err)
	}
	sig, err := ctx.Sign(sh, hash)
	if err != nil {
		t.Fatalf("C_Sign: %v", err)
	}
	if err := gost.Verify(card.PublicKey, hash, sig); err != nil {
		t.Fatalf("the card's signature: %v", err)
	}
}

// openSSLVerifyGOST2001 verifies sig (s then r) over hash with OpenSSL's
// gost engine, the key given as a GOST R 34.10-2001 SubjectPublicKeyInfo.
func openSSLVerifyGOST2001(t *testing.T, pub *gost.PublicKey, hash, sig []byte) (string, error) {
	t.Helper()
	type params struct {
		Set, Digest asn1.ObjectIdentifier
	}
	type algorithm struct {
		OID    asn1.ObjectIdentifier
		Params params
	}
	key, err := asn1.Marshal(pub.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	spki, err := asn1.Marshal(struct {
		Algorithm algorithm
		Key       asn1.BitString
	}{algorithm{asn1.ObjectIdentifier{1, 2, 643, 2, 2, 19}, params{pub.Curve.OID, asn1.ObjectIdentifier{1, 2, 643, 2, 2, 30, 1}}},
		asn1.BitString{Bytes: key, BitLength: 8 * len(key)}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{"pub.pem": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: spki}), "hash": hash, "sig": sig}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("openssl", "pkeyutl", "-verify", "-pubin", "-inkey", "pub.pem", "-in", "hash", "-sigfile", "sig")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENSSL_CONF="+signertest.GOSTEngineConf(t))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// BenchmarkGOSTCard measures signatures per second on the GOST card at
// full speed and as a card taking 300 ms a signature: pkcs11-tool (a
// process, OpenSC's bind and a login each time) and C_Sign in this process
// (logged in once; OpenSC still verifies the PIN before each signature).
func BenchmarkGOSTCard(b *testing.B) {
	card := pkcs11test.NewGOSTCard(b, pkcs11test.GOSTCardOptions{})
	ctx, release, err := pkcs11.ProvisioningContext(card.Module)
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	var slot uint
	slots, err := ctx.GetSlotList(true)
	if err != nil || len(slots) != 1 {
		b.Fatalf("slots: %v %v", slots, err)
	}
	slot = slots[0]
	sh, err := ctx.OpenSession(slot, p11.CKF_SERIAL_SESSION)
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.CloseSession(sh)
	if err := ctx.Login(sh, p11.CKU_USER, card.PIN); err != nil {
		b.Fatal(err)
	}
	if err := ctx.FindObjectsInit(sh, []*p11.Attribute{p11.NewAttribute(p11.CKA_CLASS, p11.CKO_PRIVATE_KEY)}); err != nil {
		b.Fatal(err)
	}
	keys, _, err := ctx.FindObjects(sh, 1)
	ctx.FindObjectsFinal(sh)
	if err != nil || len(keys) != 1 {
		b.Fatalf("the private key: %v", err)
	}
	hash := make([]byte, 32)
	for _, delay := range []time.Duration{0, 300 * time.Millisecond} {
		card.SetSignDelay(b, delay)
		name := "native"
		if delay > 0 {
			name = delay.String()
		}
		b.Run("pkcs11-tool/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				pkcs11ToolSign(b, card, hash)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sigs/s")
		})
		b.Run("C_Sign/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := ctx.SignInit(sh, []*p11.Mechanism{p11.NewMechanism(p11.CKM_GOSTR3410, nil)}, keys[0]); err != nil {
					b.Fatal(err)
				}
				if _, err := ctx.Sign(sh, hash); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sigs/s")
		})
	}
}
