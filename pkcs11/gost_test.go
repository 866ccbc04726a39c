package pkcs11_test

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostmech"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/signer/signertest"
)

func openGOST(t *testing.T, g *pkcs11test.GOSTToken) *pkcs11.Key {
	t.Helper()
	k, err := pkcs11.Open(context.Background(), g.Selection(), zerolog.Nop())
	if err != nil {
		t.Fatalf("open the GOST key: %v", err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// A GOST key on a token signs the trusted-authentication text in the
// certified provider's form, by both ways a token may offer (the hashing
// mechanism; Streebog on the token then the raw mechanism), with and
// without signed attributes; signagent, GnuTLS and OpenSSL's gost engine
// accept each and refuse it over a changed text.
func TestGOSTSignatures(t *testing.T) {
	for _, bits := range []int{256, 512} {
		for _, raw := range []bool{false, true} {
			name := map[bool]string{false: "hashing", true: "raw"}[raw]
			t.Run(name+"-"+map[int]string{256: "256", 512: "512"}[bits], func(t *testing.T) {
				g := pkcs11test.NewGOST(t, bits, gosttoken.Options{RawOnly: raw})
				// The text's timestamp, as the trusted flow writes it, after
				// the certificate's notBefore.
				ts := time.Now().UTC().Truncate(time.Second)
				text := []byte("apikey-0001\r\nuser-42\r\n" + ts.Format("02.01.2006 15:04:05") + "\r\n")
				k := openGOST(t, g)
				pub, ok := k.Public().(*gost.PublicKey)
				if !ok || pub.Curve.Bits != bits {
					t.Fatalf("public key %T, want a GOST %d-bit key", k.Public(), bits)
				}
				if !pub.Equal(gostmech.CertificatePublicKey(g.Cert)) || canonical.ThumbprintOf(k.Certificate()) != canonical.ThumbprintOf(g.Cert) {
					t.Fatal("the key's certificate is not the token's")
				}
				if kind, b, curve := pkcs11.KeyShape(k.Certificate()); kind != "GOST" || b != bits || curve == "" {
					t.Fatalf("KeyShape = %s %d %q", kind, b, curve)
				}
				// The token's Streebog is the standard's.
				sum, err := k.Digest(text)
				if err != nil {
					t.Fatal(err)
				}
				h := gost.NewHash(bits)
				h.Write(text)
				if string(sum) != string(h.Sum(nil)) {
					t.Fatalf("the token's Streebog-%d differs from internal/gost's", bits)
				}
				for _, noAttrs := range []bool{true, false} {
					s := &signer.CMS{Key: k, Cert: k.Certificate(), Options: signer.Options{NoSignedAttributes: noAttrs}}
					der, err := s.SignText(context.Background(), text, ts)
					if err != nil {
						t.Fatalf("sign (no attributes %v): %v", noAttrs, err)
					}
					v, err := signer.Verify(der, text, nil)
					if err != nil {
						t.Fatalf("signagent's own verification (no attributes %v): %v", noAttrs, err)
					}
					if v.SignedAttributes == noAttrs || (!noAttrs && !v.SigningTime.Equal(ts)) {
						t.Fatalf("verified %+v", v)
					}
					if _, err := signer.VerifyCerts(der, text, []*x509.Certificate{g.Cert}); err != nil {
						t.Fatalf("chain to the certificate itself: %v", err)
					}
					if _, err := signer.Verify(der, append(text, 'x'), nil); !errors.Is(err, signer.ErrBadSignature) {
						t.Fatalf("a changed text verified: %v", err)
					}
					signertest.RequireGOSTExternalVerify(t, der, text, g.Cert)
				}
				// crypto.Signer over a hash made elsewhere, with the raw
				// mechanism both builds offer.
				sig, err := k.Sign(nil, sum, nil)
				if err != nil {
					t.Fatalf("raw mechanism over a given hash: %v", err)
				}
				if err := gost.Verify(pub, sum, sig); err != nil {
					t.Fatalf("the raw signature: %v", err)
				}
			})
		}
	}
}

// GOST signatures made by GnuTLS itself (certtool) verify in signagent,
// with and without signed attributes: the verifier is checked against an
// implementation nobody here wrote.
func TestGOSTVerifiesCerttool(t *testing.T) {
	bin := signertest.NeedTool(t, "certtool")
	for _, bits := range []int{256, 512} {
		g := pkcs11test.NewGOST(t, bits, gosttoken.Options{})
		content := filepath.Join(t.TempDir(), "text")
		text := []byte("signed by certtool\r\n")
		if err := os.WriteFile(content, text, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, extra := range [][]string{nil, {"--p7-time"}} {
			out := filepath.Join(t.TempDir(), "sig.der")
			args := append([]string{"--p7-detached-sign", "--load-privkey", g.KeyFile(), "--load-certificate", g.CertFile(),
				"--infile", content, "--outder", "--outfile", out}, extra...)
			if b, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
				t.Fatalf("certtool %v: %v\n%s", args, err, b)
			}
			der, _ := os.ReadFile(out)
			v, err := signer.Verify(der, text, nil)
			if err != nil {
				t.Fatalf("%d-bit, %v: %v", bits, extra, err)
			}
			if v.SignedAttributes != (extra != nil) {
				t.Fatalf("signed attributes %v", v.SignedAttributes)
			}
			if _, err := signer.Verify(der, []byte("changed"), nil); err == nil {
				t.Fatal("a changed text verified")
			}
		}
	}
}

// Each bad input of a GOST token gets one clear error and spends no PIN
// try it need not.
func TestGOSTBadInput(t *testing.T) {
	open := func(sel pkcs11.Selection) error {
		k, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
		if err == nil {
			k.Close()
		}
		return err
	}
	text := []byte("a\r\nb\r\n01.01.2026 00:00:00\r\n")
	sign := func(t *testing.T, g *pkcs11test.GOSTToken, noAttrs bool) error {
		k := openGOST(t, g)
		_, err := (&signer.CMS{Key: k, Cert: k.Certificate(), Options: signer.Options{NoSignedAttributes: noAttrs}}).SignText(context.Background(), text, time.Now())
		return err
	}
	oneLine := func(t *testing.T, err error, want ...string) {
		t.Helper()
		if err == nil {
			t.Fatal("no error")
		}
		if strings.Contains(err.Error(), "\n") {
			t.Fatalf("error of more than one line: %q", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("error %q does not say %q", err, w)
			}
		}
	}

	t.Run("certificate missing", func(t *testing.T) {
		g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
		os.Remove(g.CertFile())
		err := open(g.Selection())
		oneLine(t, err, "no certificate")
		if !errors.Is(err, tokenerr.ErrCertNotFound) {
			t.Fatalf("%v is not tokenerr.ErrCertNotFound", err)
		}
	})
	t.Run("certificate of another algorithm", func(t *testing.T) {
		g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
		tk := pkcs11test.New(t)
		sel := g.Selection()
		sel.CertFile = filepath.Join(t.TempDir(), "rsa.pem")
		os.WriteFile(sel.CertFile, signertest.PEM(tk.RSA.Cert), 0o600)
		err := open(sel)
		oneLine(t, err, "another key")
		if !errors.Is(err, tokenerr.ErrCertMismatch) {
			t.Fatalf("%v is not tokenerr.ErrCertMismatch", err)
		}
	})
	t.Run("certificate of another GOST key", func(t *testing.T) {
		g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
		other := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
		b, _ := os.ReadFile(other.CertFile())
		os.WriteFile(g.CertFile(), b, 0o644)
		err := open(g.Selection())
		oneLine(t, err, "another key")
		if !errors.Is(err, tokenerr.ErrCertMismatch) {
			t.Fatalf("%v is not tokenerr.ErrCertMismatch", err)
		}
	})
	t.Run("unknown parameter set", func(t *testing.T) {
		g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
		g.SetFaults("paramset=1.2.643.7.1.2.1.1.1") // TC26-256-A, twisted Edwards: not known here
		oneLine(t, open(g.Selection()), "parameter set 1.2.643.7.1.2.1.1.1 is unknown")
	})
	t.Run("wrong signature length", func(t *testing.T) {
		g := pkcs11test.NewGOST(t, 512, gosttoken.Options{})
		g.SetFaults("short-signature")
		err := sign(t, g, true)
		oneLine(t, err, "returned a 127-byte signature", "makes 128")
	})
	t.Run("digest fails midway", func(t *testing.T) {
		g := pkcs11test.NewGOST(t, 256, gosttoken.Options{RawOnly: true})
		g.SetFaults("digest-fail")
		for _, noAttrs := range []bool{true, false} {
			oneLine(t, sign(t, g, noAttrs), "CKR_FUNCTION_FAILED")
		}
	})
	t.Run("neither way to sign", func(t *testing.T) {
		g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
		g.SetFaults("no-sign-mechanisms")
		err := open(g.Selection())
		oneLine(t, err, "GOSTR3410-WITH-GOSTR3411-12-256", "GOSTR3410")
		if !errors.Is(err, tokenerr.ErrKeyUsage) {
			t.Fatalf("%v is not tokenerr.ErrKeyUsage", err)
		}
	})
	t.Run("wrong PIN spends one try", func(t *testing.T) {
		g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
		sel := g.Selection()
		sel.PIN = pkcs11.PINSource{Value: "0000"}
		err := open(sel)
		oneLine(t, err)
		if !errors.Is(err, tokenerr.ErrPINIncorrect) {
			t.Fatalf("%v is not tokenerr.ErrPINIncorrect", err)
		}
		if n := g.Tries(t); n != 1 {
			t.Fatalf("%d PIN tries spent, want 1 (never retried)", n)
		}
		// The same wrong PIN is not tried again (the token's count stays)...
		if err := open(sel); !errors.Is(err, tokenerr.ErrPINIncorrect) || g.Tries(t) != 1 {
			t.Fatalf("the refused PIN again: %v, %d tries", err, g.Tries(t))
		}
		// ...a second wrong one leaves the final try, which is not spent
		// unless asked; spent, it locks the token, and then even the
		// right PIN is refused.
		sel.PIN = pkcs11.PINSource{Value: "0001"}
		open(sel)
		sel.PIN = pkcs11.PINSource{Value: "0002"}
		if err := open(sel); !errors.Is(err, tokenerr.ErrPINFinalTry) || g.Tries(t) != 2 {
			t.Fatalf("the final try: %v, %d tries", err, g.Tries(t))
		}
		sel.AllowFinalTry = true
		err = open(sel)
		if !errors.Is(err, tokenerr.ErrPINLocked) {
			t.Fatalf("after 3 wrong tries: %v, want tokenerr.ErrPINLocked", err)
		}
		if err := open(g.Selection()); !errors.Is(err, tokenerr.ErrPINLocked) {
			t.Fatalf("the right PIN on a locked token: %v", err)
		}
	})
}
