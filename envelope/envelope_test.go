package envelope_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/softhsm"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/signer/signertest"
)

// TestOpenOnSoftHSM opens challenges addressed to the token's certificate
// with the key on the token (C_Decrypt): made by this package (PKCS#1 v1.5
// and OAEP, AES-256-CBC) and by `openssl cms -encrypt` (AES-256-CBC and
// AES-128-CBC, PKCS#1 v1.5 and OAEP), as the service's would be.
func TestOpenOnSoftHSM(t *testing.T) {
	tk := pkcs11test.NewWith(t, pkcs11test.Options{Extra: []softhsm.KeySpec{{Type: softhsm.RSA2048, Label: "sign-only", ID: []byte{9}, NoDecrypt: true}}})
	key := tk.Open(t, "rsa")
	defer key.Close()
	cert := key.Certificate()
	secret := []byte("a random of 32 bytes, say......!")
	sealed := map[string][]byte{}
	for _, oaep := range []bool{false, true} {
		der, err := envelope.Seal(secret, cert, oaep)
		if err != nil {
			t.Fatal(err)
		}
		sealed[map[bool]string{false: "Seal PKCS#1 v1.5", true: "Seal OAEP"}[oaep]] = der
	}
	ossl := signertest.NeedTool(t, "openssl")
	dir := t.TempDir()
	certFile, in := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "in")
	os.WriteFile(certFile, signertest.PEM(cert), 0o600)
	os.WriteFile(in, secret, 0o600)
	for name, args := range map[string][]string{
		"openssl aes256":      {"-aes256"},
		"openssl aes128":      {"-aes128"},
		"openssl aes256 OAEP": {"-aes256", "-keyopt", "rsa_padding_mode:oaep"},
	} {
		out := filepath.Join(dir, "env.der")
		// -keyopt applies to the -recip before it.
		cmd := exec.Command(ossl, append([]string{"cms", "-encrypt", "-binary", "-in", in, "-outform", "DER", "-out", out, "-recip", certFile}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		sealed[name], _ = os.ReadFile(out)
	}
	for name, der := range sealed {
		t.Run(name, func(t *testing.T) {
			got, err := envelope.Open(der, cert, key)
			if err != nil || string(got) != string(secret) {
				t.Fatalf("%q, %v", got, err)
			}
		})
	}

	t.Run("bad envelopes", func(t *testing.T) {
		good := sealed["Seal PKCS#1 v1.5"]
		other := otherCert(t)
		toOther, err := envelope.Seal(secret, other, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			der  []byte
			want error
		}{
			{"truncated", good[:len(good)/2], envelope.ErrMalformed},
			{"trailing bytes", append(append([]byte{}, good...), 0), envelope.ErrMalformed},
			{"base64, not DER", []byte(strings.Repeat("MIAGCSqGSIb3DQEHA6CAMIAC", 4)), envelope.ErrMalformed},
			{"empty", nil, envelope.ErrMalformed},
			{"a signature, not an envelope", signedData(t), envelope.ErrMalformed},
			{"addressed to another certificate", toOther, envelope.ErrNotForUs},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if _, err := envelope.Open(tc.der, cert, key); !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
			})
		}
	})

	t.Run("a key that may not decrypt", func(t *testing.T) {
		so := tk.Open(t, "sign-only")
		defer so.Close()
		der, err := envelope.Seal(secret, so.Certificate(), false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := envelope.Open(der, so.Certificate(), so); !errors.Is(err, tokenerr.ErrKeyUsage) || !strings.Contains(err.Error(), "CKA_DECRYPT") {
			t.Fatalf("err = %v", err)
		}
	})
}

// otherCert is a certificate whose key is not on the token.
func otherCert(t *testing.T) *x509.Certificate {
	k, _ := rsa.GenerateKey(rand.Reader, 2048)
	c, err := softhsm.SelfSigned(k, "someone else", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// signedData is a DER ContentInfo of type SignedData: well-formed, but not
// an envelope.
func signedData(*testing.T) []byte {
	return []byte{0x30, 0x0f, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x02, 0xa0, 0x02, 0x30, 0x00}
}

// TestGOSTTransportToRSACertificate: GOST key transport addressed to an RSA
// certificate is not that certificate's challenge: refused before the
// token is asked anything.
func TestGOSTTransportToRSACertificate(t *testing.T) {
	cert := otherCert(t)
	s := challengeSpec(t, cert, make([]byte, envelope.ChallengeSize), 32)
	s.keyAlg, s.keyParams = asn1.ObjectIdentifier{1, 2, 643, 7, 1, 1, 1, 1}, nil
	_, err := envelope.Open(s.der(t), cert, nil) // no key: it must not be reached
	if !errors.Is(err, envelope.ErrNotChallenge) || !strings.Contains(err.Error(), "GOST key transport") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzRecipients: any bytes give recipients or ErrMalformed, never a panic.
func FuzzRecipients(f *testing.F) {
	f.Add([]byte{0x30, 0x0f, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x03, 0xa0, 0x02, 0x30, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := envelope.Recipients(b); err != nil && !errors.Is(err, envelope.ErrMalformed) {
			t.Fatalf("err = %v", err)
		}
	})
}
