package pkcs11_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostkeyx"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/signer/signertest"
)

// A challenge OpenSSL's gost engine seals to the token's certificate (256
// and 512-bit keys, both content S-boxes) opens on the GOST test module
// to the same random, by every way the module's build offers: derive and
// unwrap with the KEK diversified by CKM_KDF_4357 or in the derive
// (CKD_KDF_4357), and the one-step CKM_GOSTR3410_KEY_WRAP; each way
// leaves no session key behind.
func TestGOSTCertLoginWays(t *testing.T) {
	for _, bits := range []int{256, 512} {
		for _, oneStep := range []bool{false, true} {
			name := map[bool]string{false: "derive", true: "one-step"}[oneStep] + "-" + map[int]string{256: "256", 512: "512"}[bits]
			t.Run(name, func(t *testing.T) {
				g := pkcs11test.NewGOST(t, bits, gosttoken.Options{OneStepUnwrap: oneStep})
				k := openGOST(t, g)
				ways, err := k.GOSTLoginWays(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				want := []gostkeyx.Way{gostkeyx.DeriveKDF4357, gostkeyx.DeriveDiversified}
				if oneStep {
					want = []gostkeyx.Way{gostkeyx.OneStep}
				}
				if !slices.Equal(ways, want) {
					t.Fatalf("ways %v, want %v", ways, want)
				}
				for _, cryptoProA := range []bool{false, true} {
					random := make([]byte, 32)
					rand.Read(random)
					der := signertest.OpenSSLEncryptGOST(t, random, g.Cert, cryptoProA)
					got, err := envelope.Open(der, g.Cert, k)
					if err != nil || !bytes.Equal(got, random) {
						t.Fatalf("content S-box CryptoPro-A %v: opened to %x, %v; want %x", cryptoProA, got, err, random)
					}
					for _, w := range ways {
						tr, err := envelope.GOSTTransport(der, g.Cert)
						if err != nil {
							t.Fatal(err)
						}
						if got, err := k.OpenGOSTWay(context.Background(), w, tr); err != nil || !bytes.Equal(got, random) {
							t.Fatalf("%s: %x, %v", w.Short(), got, err)
						}
					}
					if n := g.GOSTObjects(t); n != 0 {
						t.Fatalf("%d session keys left on the token", n)
					}
				}
				// A way the build does not offer fails cleanly and leaves nothing.
				other := gostkeyx.OneStep
				if oneStep {
					other = gostkeyx.DeriveKDF4357
				}
				tr, err := envelope.GOSTTransport(signertest.OpenSSLEncryptGOST(t, make([]byte, 32), g.Cert, false), g.Cert)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := k.OpenGOSTWay(context.Background(), other, tr); err == nil {
					t.Fatalf("%s worked on a build without it", other.Short())
				}
				if n := g.GOSTObjects(t); n != 0 || k.Token().Lost() != nil {
					t.Fatalf("%d session keys left; lost: %v", n, k.Token().Lost())
				}
			})
		}
	}
}

// The committed envelopes OpenSSL made to the fixture keys open on the
// module to the committed plaintext.
func TestGOSTCertLoginFixtures(t *testing.T) {
	for _, bits := range []string{"256", "512"} {
		g := pkcs11test.NewGOSTFixture(t, bits, gosttoken.Options{})
		k := openGOST(t, g)
		plain := signertest.GOSTFixture(t, "plain"+bits+".bin")
		for _, set := range []string{"z", "a"} {
			got, err := envelope.Open(signertest.GOSTFixture(t, "env"+bits+"-"+set+".der"), g.Cert, k)
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("env%s-%s.der: %x, %v", bits, set, got, err)
			}
		}
	}
}

// Faults a real token may show: a MAC that fails on the token (the
// challenge's fault: the one uniform error, the key still in use, nothing
// left behind, no PIN try), a token without the mechanisms or a key that
// may not derive (refused before anything is decrypted, naming what is
// missing), a derive that takes no kdf signagent asks for, a decryption
// that fails.
func TestGOSTCertLoginFaults(t *testing.T) {
	g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
	random := make([]byte, 32)
	rand.Read(random)
	der := signertest.OpenSSLEncryptGOST(t, random, g.Cert, false)
	for _, tc := range []struct {
		fault string
		// before: CanOpenGOST's error names this; "" when it passes.
		before string
		// after: the challenge then fails with ErrChallenge.
		after bool
	}{
		{fault: "bad-mac", after: true},
		{fault: "kdf=none", after: true},
		{fault: "decrypt-fail", after: true},
		{fault: "no-derive", before: "CKM_GOSTR3410_12_DERIVE"},
		{fault: "no-unwrap-mechanism", before: "CKM_GOST28147_KEY_WRAP"},
		{fault: "no-decrypt", before: "CKM_GOST28147"},
		{fault: "no-derive-attr", before: "CKA_DERIVE is false"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			if err := g.SetFaults(tc.fault); err != nil {
				t.Fatal(err)
			}
			defer g.SetFaults()
			k := openGOST(t, g)
			tries := g.Tries(t)
			err := k.CanOpenGOST()
			if tc.before != "" {
				if !errors.Is(err, tokenerr.ErrKeyUsage) || !strings.Contains(err.Error(), tc.before) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("CanOpenGOST: %v; want tokenerr.ErrKeyUsage naming %s", err, tc.before)
				}
				if _, err := envelope.Open(der, g.Cert, k); err == nil || errors.Is(err, envelope.ErrChallenge) {
					t.Fatalf("Open: %v; want the token's refusal before any decryption", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CanOpenGOST: %v", err)
			}
			if got, err := envelope.Open(der, g.Cert, k); err != envelope.ErrChallenge || got != nil {
				t.Fatalf("Open: %x, %v; want exactly ErrChallenge", got, err)
			}
			if n := g.GOSTObjects(t); n != 0 {
				t.Fatalf("%d session keys left on the token", n)
			}
			if g.Tries(t) != tries {
				t.Fatal("a PIN try was spent")
			}
			if tc.fault == "bad-mac" || tc.fault == "kdf=none" {
				// The challenge's fault, not the device's: the key stays in use.
				g.SetFaults()
				if got, err := envelope.Open(der, g.Cert, k); err != nil || !bytes.Equal(got, random) {
					t.Fatalf("after the fault: %x, %v (lost: %v)", got, err, k.Token().Lost())
				}
			}
		})
	}
}

// BenchmarkCertLoginOpen: the time to open one certificate-login challenge
// on the token, in one run: GOST 256 and 512 on the GOST test module (each
// way its builds offer) and RSA-2048 on SoftHSM (PKCS#1 v1.5 key transport,
// AES-CBC here). envelope.Open is what a login calls; the envelope is
// sealed once, as the service would (the emulator's sealer).
func BenchmarkCertLoginOpen(b *testing.B) {
	bench := func(b *testing.B, der []byte, cert *x509.Certificate, key crypto.Decrypter) {
		for b.Loop() {
			if _, err := envelope.Open(der, cert, key); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, bits := range []int{256, 512} {
		for _, oneStep := range []bool{false, true} {
			g := pkcs11test.NewGOST(b, bits, gosttoken.Options{OneStepUnwrap: oneStep})
			k, err := pkcs11.Open(context.Background(), g.Selection(), zerolog.Nop())
			if err != nil {
				b.Fatal(err)
			}
			ways, err := k.GOSTLoginWays(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			der, err := envelope.Seal(make([]byte, 32), g.Cert, false)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("gost%d/%s", bits, ways[0].Short()), func(b *testing.B) { bench(b, der, g.Cert, k) })
			k.Close()
		}
	}
	tk := pkcs11test.New(b)
	key := tk.Open(b, tk.RSA.Label)
	der, err := envelope.Seal(make([]byte, 32), key.Certificate(), false)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("rsa2048/pkcs1v15", func(b *testing.B) { bench(b, der, key.Certificate(), key) })
}
