package pkcs11_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/softhsm"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/signer/signertest"
)

func TestSignOnToken(t *testing.T) { pkcs11test.Each(t, testSignOnToken) }

func testSignOnToken(t *testing.T, tk *pkcs11test.Token) {
	text := canonical.Text("KEY", canonical.Credential{Kind: canonical.Phone, Value: "9161234567"}, canonical.Now())
	for _, ref := range []pkcs11test.KeyRef{tk.RSA, tk.EC} {
		t.Run(ref.Label, func(t *testing.T) {
			k := tk.Open(t, ref.Label)
			if !k.Certificate().Equal(ref.Cert) {
				t.Fatal("wrong certificate")
			}
			if !bytes.Equal(k.ID(), ref.ID) || k.Label() != ref.Label {
				t.Fatalf("id %x label %q", k.ID(), k.Label())
			}
			digest := sha256.Sum256(text)
			sig, err := k.Sign(nil, digest[:], crypto.SHA256)
			if err != nil {
				t.Fatal(err)
			}
			switch pub := k.Public().(type) {
			case *rsa.PublicKey:
				err = rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig)
			case *ecdsa.PublicKey:
				if !ecdsa.VerifyASN1(pub, digest[:], sig) {
					err = errors.New("ECDSA signature does not verify")
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, noAttrs := range []bool{false, true} {
				der, err := signer.Sign(text, k, k.Certificate(), signer.Options{NoSignedAttributes: noAttrs, SigningTime: time.Now()})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := signer.Verify(der, text, nil); err != nil {
					t.Fatal(err)
				}
				signertest.RequireExternalVerify(t, der, text, k.Certificate(), []*x509.Certificate{k.Certificate()})
			}
		})
	}
}

func TestP384OnToken(t *testing.T) {
	tk := pkcs11test.NewWith(t, pkcs11test.Options{Extra: []softhsm.KeySpec{{Type: softhsm.P384, Label: "p384", ID: []byte{3}}}})
	k := tk.Open(t, "p384")
	text := []byte("apikey=k\r\nid=1\r\ntimestamp=01.01.2026 00:00:00\r\n")
	der, err := signer.Sign(text, k, k.Certificate(), signer.Options{Hash: crypto.SHA384})
	if err != nil {
		t.Fatal(err)
	}
	signertest.RequireExternalVerify(t, der, text, k.Certificate(), []*x509.Certificate{k.Certificate()})
}

func TestSelectionByURIAndID(t *testing.T) { pkcs11test.Each(t, testSelection) }

func testSelection(t *testing.T, tk *pkcs11test.Token) {
	pctID := ""
	for _, b := range tk.EC.ID {
		pctID += fmt.Sprintf("%%%02x", b)
	}
	for name, sel := range map[string]pkcs11.Selection{
		"uri":    {URI: "pkcs11:token=" + tk.Label + ";object=ec?module-path=" + tk.Module + "&pin-source=file:" + tk.PINFile},
		"uri-id": {Module: tk.Module, URI: "pkcs11:serial=" + tk.Serial + ";id=" + pctID, PIN: pkcs11.PINSource{File: tk.PINFile}},
		"key-id": {Module: tk.Module, Token: tokeninfo.TokenSelector{Serial: tk.Serial}, KeyID: tk.EC.ID, PIN: pkcs11.PINSource{File: tk.PINFile}},
	} {
		t.Run(name, func(t *testing.T) {
			k, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			if k.Label() != "ec" {
				t.Fatalf("chose %q", k.Label())
			}
		})
	}
}

// requireOpenError opens the rsa key with the selection edited and requires
// error want: one line naming inText, without the PIN.
func requireOpenError(t *testing.T, tk *pkcs11test.Token, edit func(*pkcs11.Selection), want error, inText string) {
	t.Helper()
	sel := tk.Selection("rsa")
	edit(&sel)
	k, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
	if err == nil {
		k.Close()
		t.Fatal("opened")
	}
	if msg := err.Error(); !errors.Is(err, want) || !strings.Contains(msg, inText) || strings.Contains(msg, "\n") || strings.Contains(msg, tk.PIN) {
		t.Fatalf("err = %q, want %v: one line naming %q, without the PIN", msg, want, inText)
	}
}

// TestOpenErrorsOnEachKind: the errors that make sense on any token, on
// SoftHSM and on the TPM.
func TestOpenErrorsOnEachKind(t *testing.T) {
	pkcs11test.Each(t, func(t *testing.T, tk *pkcs11test.Token) {
		dir := t.TempDir()
		wrongPIN := filepath.Join(dir, "wrong-pin")
		os.WriteFile(wrongPIN, []byte("000000\n"), 0o600)
		otherCert := filepath.Join(dir, "other.pem")
		os.WriteFile(otherCert, signertest.PEM(tk.RSA.Cert), 0o600)
		for _, tc := range []struct {
			name   string
			edit   func(*pkcs11.Selection)
			want   error
			inText string
		}{
			{"unknown token", func(s *pkcs11.Selection) { s.Token.Label = "nope" }, tokenerr.ErrTokenNotFound, tk.Label},
			{"wrong PIN", func(s *pkcs11.Selection) { s.PIN.File = wrongPIN }, tokenerr.ErrPINIncorrect, wrongPIN},
			{"key label matches nothing", func(s *pkcs11.Selection) { s.KeyLabel = "absent" }, tokenerr.ErrKeyNotFound, `"rsa"`},
			{"no key chosen among two", func(s *pkcs11.Selection) { s.KeyLabel = "" }, tokenerr.ErrKeyAmbiguous, "choose one"},
			{"certificate of another key", func(s *pkcs11.Selection) { s.KeyLabel = "ec"; s.CertFile = otherCert }, tokenerr.ErrCertMismatch, "another key"},
		} {
			t.Run(tc.name, func(t *testing.T) { requireOpenError(t, tk, tc.edit, tc.want, tc.inText) })
		}
	})
}

func TestOpenErrors(t *testing.T) {
	tk := pkcs11test.NewWith(t, pkcs11test.Options{Extra: []softhsm.KeySpec{
		{Type: softhsm.P256, Label: "twin", ID: []byte{0x10}},
		{Type: softhsm.P256, Label: "twin", ID: []byte{0x11}},
		{Type: softhsm.P256, Label: "expired", ID: []byte{0x12}, NotBefore: time.Now().AddDate(-2, 0, 0), NotAfter: time.Now().AddDate(-1, 0, 0)},
		{Type: softhsm.P256, Label: "nocert", ID: []byte{0x13}, NoCert: true},
	}})
	dir := t.TempDir()
	notModule := filepath.Join(dir, "not-a-module.so")
	os.WriteFile(notModule, []byte("hello"), 0o600)

	for _, tc := range []struct {
		name   string
		edit   func(*pkcs11.Selection)
		want   error
		inText string
	}{
		{"module missing", func(s *pkcs11.Selection) { s.Module = "/nonexistent/lib.so" }, tokenerr.ErrModuleNotFound, "does not exist"},
		{"not a module", func(s *pkcs11.Selection) { s.Module = notModule }, tokenerr.ErrNotAModule, "not-a-module.so"},
		{"no PIN", func(s *pkcs11.Selection) { s.PIN = pkcs11.PINSource{} }, tokenerr.ErrPINMissing, "no PIN"},
		{"key label matches nothing", func(s *pkcs11.Selection) { s.KeyLabel = "absent" }, tokenerr.ErrKeyNotFound, `"rsa" (id 01)`},
		{"key label matches two", func(s *pkcs11.Selection) { s.KeyLabel = "twin" }, tokenerr.ErrKeyAmbiguous, `"twin" (id 10), "twin" (id 11)`},
		{"no key chosen among many", func(s *pkcs11.Selection) { s.KeyLabel = "" }, tokenerr.ErrKeyAmbiguous, "choose one"},
		{"no certificate", func(s *pkcs11.Selection) { s.KeyLabel = "nocert" }, tokenerr.ErrCertNotFound, "--cert"},
		{"pin-value in URI", func(s *pkcs11.Selection) { s.URI = "pkcs11:token=x?pin-value=1234" }, tokenerr.ErrBadURI, "pin-value"},
		{"URI contradicts flag", func(s *pkcs11.Selection) { s.URI = "pkcs11:object=ec" }, tokenerr.ErrBadSelection, "both"},
	} {
		t.Run(tc.name, func(t *testing.T) { requireOpenError(t, tk, tc.edit, tc.want, tc.inText) })
	}

	t.Run("expired certificate signs with a warning", func(t *testing.T) {
		var logs bytes.Buffer
		k, err := pkcs11.Open(context.Background(), tk.Selection("expired"), zerolog.New(&logs))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		if _, err := signer.Sign([]byte("x"), k, k.Certificate(), signer.Options{NoSignedAttributes: true}); err != nil {
			t.Fatal(err)
		}
		want := k.Certificate().NotAfter.UTC().Format("2006-01-02")
		if !strings.Contains(logs.String(), "expired on "+want) {
			t.Fatalf("no warning naming %s: %s", want, logs.String())
		}
	})
}

// TestTokenRemovedBetweenOpenAndSign: the real SoftHSM token goes away
// after the key was found. The signature fails as the token's failure (so
// an owner reconnects), later ones fail at once, and once the token is back
// a new Open finds it: Close initialized the module again.
func TestTokenRemovedBetweenOpenAndSign(t *testing.T) {
	tk := pkcs11test.New(t)
	k, err := pkcs11.Open(context.Background(), tk.Selection("rsa"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256([]byte("x"))
	tk.Remove(t)
	_, err = k.Sign(nil, digest[:], crypto.SHA256)
	if !tokenerr.Recoverable(err) || !errors.Is(err, tokenerr.ErrTokenLost) || k.Token().Lost() == nil {
		t.Fatalf("err = %v", err)
	}
	if _, err := k.Sign(nil, digest[:], crypto.SHA256); !errors.Is(err, tokenerr.ErrTokenUnavailable) {
		t.Fatalf("second signature: %v", err)
	}
	k.Close()
	if _, err := pkcs11.Open(context.Background(), tk.Selection("rsa"), zerolog.Nop()); !errors.Is(err, tokenerr.ErrModuleFailed) && !errors.Is(err, tokenerr.ErrTokenNotFound) && !tokenerr.Recoverable(err) {
		t.Fatalf("open while out: %v", err)
	}
	tk.Insert(t)
	k = tk.Open(t, "rsa")
	if _, err := k.Sign(nil, digest[:], crypto.SHA256); err != nil {
		t.Fatalf("after the token came back: %v", err)
	}
}

// TestValidCertificateBeatsExpired: an expired certificate stored beside a
// valid one under the same id and label is passed over.
func TestValidCertificateBeatsExpired(t *testing.T) {
	tk := pkcs11test.New(t)
	k := tk.Open(t, "rsa")
	old, err := softhsm.SelfSigned(k, "expired twin", time.Now().AddDate(-3, 0, 0), time.Now().AddDate(-1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
	if err := softhsm.ImportCertificate(tk.Module, tk.Label, tk.PIN, tk.RSA.ID, "rsa", old); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		k := tk.Open(t, "rsa")
		if !k.Certificate().Equal(tk.RSA.Cert) {
			t.Fatalf("chose %q (valid until %s)", k.Certificate().Subject.CommonName, k.Certificate().NotAfter)
		}
		k.Close()
	}
	// A second valid one is an error naming both.
	k = tk.Open(t, "rsa")
	twin, err := softhsm.SelfSigned(k, "valid twin", time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
	if err := softhsm.ImportCertificate(tk.Module, tk.Label, tk.PIN, tk.RSA.ID, "rsa", twin); err != nil {
		t.Fatal(err)
	}
	_, err = pkcs11.Open(context.Background(), tk.Selection("rsa"), zerolog.Nop())
	if !errors.Is(err, tokenerr.ErrCertAmbiguous) || !strings.Contains(err.Error(), canonical.ThumbprintOf(twin)) || !strings.Contains(err.Error(), canonical.ThumbprintOf(tk.RSA.Cert)) {
		t.Fatalf("err = %v", err)
	}
}

// TestDecryptOnSoftHSM: the development keys may decrypt (certificate
// login), with PKCS#1 v1.5 and OAEP; a key made without CKA_DECRYPT says so.
func TestDecryptOnSoftHSM(t *testing.T) {
	tk := pkcs11test.NewWith(t, pkcs11test.Options{Extra: []softhsm.KeySpec{{Type: softhsm.RSA2048, Label: "sign-only", ID: []byte{9}, NoDecrypt: true}}})
	k := tk.Open(t, "rsa")
	pub := k.Public().(*rsa.PublicKey)
	ct, _ := rsa.EncryptPKCS1v15(rand.Reader, pub, []byte("challenge"))
	if pt, err := k.Decrypt(nil, ct, nil); err != nil || string(pt) != "challenge" {
		t.Fatalf("PKCS#1 v1.5: %q %v", pt, err)
	}
	// SoftHSM offers OAEP with SHA-1 only.
	ct, _ = rsa.EncryptOAEP(sha1.New(), rand.Reader, pub, []byte("challenge"), nil)
	if pt, err := k.Decrypt(nil, ct, &rsa.OAEPOptions{Hash: crypto.SHA1}); err != nil || string(pt) != "challenge" {
		t.Fatalf("OAEP: %q %v", pt, err)
	}
	k.Close()
	so := tk.Open(t, "sign-only")
	if _, err := so.Decrypt(nil, ct, nil); !errors.Is(err, tokenerr.ErrKeyUsage) || !strings.Contains(err.Error(), "CKA_DECRYPT") {
		t.Fatalf("err = %v", err)
	}
}

// TestExpectOnlyThatToken: a key opened as the only token's (no label, no
// serial) and opened again with Expect set is opened only on that token.
// Another token alone in its place is ErrOtherToken, one line naming both
// serials, without a PIN sent (SoftHSM would keep the wrong try as
// pin-count-low); a stranger's serial on the agent's token is refused for
// its key; the token itself opens again. SoftHSM tokens swapped in place.
func TestExpectOnlyThatToken(t *testing.T) {
	tk := pkcs11test.New(t)
	other := pkcs11test.NewWith(t, pkcs11test.Options{ForProcesses: true})
	other.SetPIN(t, "654321")
	sel := tk.Selection(tk.RSA.Label)
	sel.Token = tokeninfo.TokenSelector{} // the only token
	k, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	id := k.Identity()
	if id.Serial != tk.Serial || id.Label != tk.Label || !k.Public().(*rsa.PublicKey).Equal(id.Public) {
		t.Fatalf("identity %+v", id)
	}
	k.Close()
	sel.Expect = &id

	tk.Remove(t)
	tk.PutIn(t, other)
	_, err = pkcs11.Open(context.Background(), sel, zerolog.Nop())
	want := "a different token, serial " + other.Serial + ", is in the reader; this agent's is serial " + tk.Serial
	if !errors.Is(err, pkcs11.ErrOtherToken) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("another token in its place: %v", err)
	}
	tokens, err := pkcs11.ListTokens(context.Background(), tk.Module)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tokens {
		if ti.Serial == other.Serial && strings.Contains(strings.Join(ti.Flags, " "), "pin-count-low") {
			t.Fatalf("the other token counted a wrong PIN: %v", ti.Flags)
		}
	}
	tk.TakeOut(t)
	tk.Insert(t)

	// The agent's token, expected with another key: refused before the
	// login where the token shows the key's public-key object ...
	wrong := id
	wrong.Public = tk.EC.Cert.PublicKey
	sel.Expect = &wrong
	if _, err := pkcs11.Open(context.Background(), sel, zerolog.Nop()); !errors.Is(err, pkcs11.ErrOtherToken) || !strings.Contains(err.Error(), "but not this agent's key; no PIN was sent to it") {
		t.Fatalf("the same token with another key expected: %v", err)
	}
	// ... and, where it shows none without a login, after the login,
	// before anything is signed.
	del := exec.Command("pkcs11-tool", "--module", tk.Module, "--login", "--pin", tk.PIN, "--delete-object", "--type", "pubkey", "--label", tk.RSA.Label)
	del.Env = append(os.Environ(), tk.Env()...)
	if out, err := del.CombinedOutput(); err != nil {
		t.Fatalf("pkcs11-tool --delete-object: %v\n%s", err, out)
	}
	wrong.PublicShown = false // expected from a token that showed none either
	if _, err := pkcs11.Open(context.Background(), sel, zerolog.Nop()); !errors.Is(err, pkcs11.ErrOtherToken) || !strings.Contains(err.Error(), "is not this agent's key; nothing was signed with it") {
		t.Fatalf("the same token with another key expected, its public-key object gone: %v", err)
	}
	// The token was opened showing the key's public half without a
	// login: one of its serial and label that shows none gets no PIN (a
	// card of another profile; a token the module has not fully read).
	if !id.PublicShown {
		t.Fatal("SoftHSM showed the key's public half without a login, and the identity does not say so")
	}
	sel.Expect = &id
	if _, err := pkcs11.Open(context.Background(), sel, zerolog.Nop()); !errors.Is(err, pkcs11.ErrOtherToken) || !strings.Contains(err.Error(), "shows no public half of this agent's key without a login") || !strings.Contains(err.Error(), "no PIN was sent") {
		t.Fatalf("the expected token showing no public half: %v", err)
	}
	if ti := tokenFlags(t, tk); strings.Contains(ti, "pin-count-low") {
		t.Fatalf("a PIN was counted: %s", ti)
	}
	shownNot := id
	shownNot.PublicShown = false
	sel.Expect = &shownNot
	k, err = pkcs11.Open(context.Background(), sel, zerolog.Nop())
	if err != nil {
		t.Fatalf("the token expected: %v", err)
	}
	if k.Identity().PublicShown {
		t.Fatal("the identity says the public half was shown; the token has none")
	}
	k.Close()
}

// tokenFlags returns tk's token's flags, as ListTokens reads them.
func tokenFlags(t *testing.T, tk *pkcs11test.Token) string {
	t.Helper()
	tokens, err := pkcs11.ListTokens(context.Background(), tk.Module)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tokens {
		if ti.Serial == tk.Serial {
			return strings.Join(ti.Flags, " ")
		}
	}
	t.Fatalf("no token of serial %s", tk.Serial)
	return ""
}
