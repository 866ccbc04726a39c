package pkcs11_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostkeyx"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/signer/signertest"
)

// oidSignWithDigest256 is id-tc26-signwithdigest-gost3410-12-256 in DER.
var oidSignWithDigest256 = []byte{0x06, 0x08, 0x2a, 0x85, 0x03, 0x07, 0x01, 0x01, 0x03, 0x02}

// A GOST key on a token that offers only the raw CKM_GOSTR3410 (as OpenSC
// offers a card's): signagent hashes with Streebog-256 itself and signs
// raw; the CMS is GOST R 34.10-2012-256 and GnuTLS and OpenSSL's gost
// engine verify it. With the certificate hidden it comes from
// --certificate-file; with the public key hidden too, a first signature
// proves the certificate is the key's.
func TestGOSTRawOnly(t *testing.T) {
	for _, tc := range []struct {
		name     string
		faults   []string
		certFile bool
	}{
		{"certificate and public key on the token", pkcs11test.GOSTCardLike, false},
		{"certificate from a file", pkcs11test.GOSTCardNoCert, true},
		{"no public key object either", pkcs11test.GOSTCardNoCertNoPub, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
			if err := g.SetFaults(tc.faults...); err != nil {
				t.Fatal(err)
			}
			sel := g.Selection()
			if tc.certFile {
				sel.CertFile = g.CertFile()
			}
			var logs bytes.Buffer
			k, err := pkcs11.Open(context.Background(), sel, zerolog.New(&logs))
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer k.Close()
			want := "Streebog-256 in signagent, then raw CKM_GOSTR3410 on the token"
			if k.GOSTWay() != want {
				t.Fatalf("way %q, want %q", k.GOSTWay(), want)
			}
			if n := strings.Count(logs.String(), want); n != 1 {
				t.Fatalf("the way logged %d times, want once:\n%s", n, logs.String())
			}
			if canonical.ThumbprintOf(k.Certificate()) != canonical.ThumbprintOf(g.Cert) {
				t.Fatal("the key's certificate is not the token's own")
			}
			if _, err := k.Digest([]byte("x")); !errors.Is(err, pkcs11.ErrNoDigest) {
				t.Fatalf("Digest on a raw-only token: %v, want ErrNoDigest", err)
			}
			text := []byte("apikey-0001\r\nuser-42\r\n" + time.Now().UTC().Format("02.01.2006 15:04:05") + "\r\n")
			for _, noAttrs := range []bool{true, false} {
				der, err := (&signer.CMS{Key: k, Cert: k.Certificate(), Options: signer.Options{NoSignedAttributes: noAttrs}}).SignText(context.Background(), text, time.Now())
				if err != nil {
					t.Fatalf("sign (no attributes %v): %v", noAttrs, err)
				}
				if !bytes.Contains(der, oidSignWithDigest256) {
					t.Fatal("the CMS does not name id-tc26-signwithdigest-gost3410-12-256")
				}
				v, err := signer.Verify(der, text, nil)
				if err != nil {
					t.Fatalf("signagent's verification: %v", err)
				}
				if !v.Signer.Equal(g.Cert) {
					t.Fatal("the CMS names another signer")
				}
				signertest.RequireGOSTExternalVerify(t, der, text, g.Cert)
			}
			// crypto.Signer over a hash made elsewhere: the raw mechanism.
			sum := gost.Sum256(text)
			sig, err := k.Sign(nil, sum, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := gost.Verify(k.Public().(*gost.PublicKey), sum, sig); err != nil {
				t.Fatalf("raw signature: %v", err)
			}
		})
	}
}

// What token check shows of a raw-only token: trusted authentication by
// Streebog here and the raw mechanism; certificate login not offered (no
// GOST key agreement), which is not a failure.
func TestGOSTRawOnlyCapabilities(t *testing.T) {
	g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
	g.SetFaults(pkcs11test.GOSTCardLike...)
	k := openGOST(t, g)
	ctx := context.Background()
	// (What token check makes of it, tokencmd's Capabilities, is
	// TestTokenCheckGOSTRawOnly's.)
	if way := k.GOSTWay(); !strings.Contains(way, "Streebog-256 in signagent, then raw CKM_GOSTR3410") {
		t.Fatalf("trusted authentication's way: %q", way)
	}
	err := k.CanOpenGOSTContext(ctx)
	if !errors.Is(err, gostkeyx.ErrNoKeyAgreement) || !errors.Is(err, tokenerr.ErrKeyUsage) {
		t.Fatalf("a certificate login on a raw-only token: %v", err)
	}
	if !strings.Contains(err.Error(), "not offered by this token (no GOST key agreement; a vendor module is needed, see docs/tokens.md)") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %q", err)
	}
}

// Each bad input of a raw-only token or of --certificate-file: one clear
// line of the right kind, no PIN try spent.
func TestGOSTCertificateFileBadInput(t *testing.T) {
	other := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
	notCert := filepath.Join(t.TempDir(), "not.pem")
	os.WriteFile(notCert, []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"), 0o600)
	gost2001 := pkcs11test.GOST2001Certificate(t)
	for _, tc := range []struct {
		name   string
		faults []string
		cert   func(g *pkcs11test.GOSTToken) string
		kind   error
		want   []string
	}{
		{"another key's certificate, public key shown", pkcs11test.GOSTCardNoCert, func(*pkcs11test.GOSTToken) string { return other.CertFile() },
			tokenerr.ErrCertMismatch, []string{"is for another key than \"gost256\"", canonical.ThumbprintOf(other.Cert)}},
		{"another key's certificate, no public key", pkcs11test.GOSTCardNoCertNoPub, func(*pkcs11test.GOSTToken) string { return other.CertFile() },
			tokenerr.ErrCertMismatch, []string{"is not for key \"gost256\"", canonical.ThumbprintOf(other.Cert), "does not verify"}},
		{"not a certificate", pkcs11test.GOSTCardNoCert, func(*pkcs11test.GOSTToken) string { return notCert },
			tokenerr.ErrCertNotFound, []string{notCert, "holds no certificate"}},
		{"a GOST-2001 certificate", pkcs11test.GOSTCardNoCertNoPub, func(*pkcs11test.GOSTToken) string { return gost2001 },
			tokenerr.ErrCertMismatch, []string{"GOST R 34.10-2001 certificate", "2012-256"}},
		{"an expired certificate", pkcs11test.GOSTCardNoCert, func(g *pkcs11test.GOSTToken) string { return g.ExpiredCertificate(t) },
			tokenerr.ErrCertMismatch, []string{"expired on 2021-01-01"}},
		{"no public key and no certificate", pkcs11test.GOSTCardNoCertNoPub, func(*pkcs11test.GOSTToken) string { return "" },
			tokenerr.ErrTokenRefused, []string{"--certificate-file"}},
		{"no GOST mechanism at all", pkcs11test.GOSTNoMechanismAtAll, func(g *pkcs11test.GOSTToken) string { return g.CertFile() },
			tokenerr.ErrKeyUsage, []string{"offers no GOST signature mechanism", "GOSTR3410"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
			g.SetFaults(tc.faults...)
			sel := g.Selection()
			sel.CertFile = tc.cert(g)
			k, err := pkcs11.Open(context.Background(), sel, zerolog.Nop())
			if err == nil {
				k.Close()
				t.Fatal("opened")
			}
			if !errors.Is(err, tc.kind) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q, want one line of %v", err, tc.kind)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			if g.Tries(t) != 0 {
				t.Fatal("a PIN try was spent")
			}
		})
	}
}
