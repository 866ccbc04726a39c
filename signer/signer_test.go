package signer_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/signer/signertest"
)

var text = []byte("apikey=0f6c2e5b\r\nid=9161234567\r\ntimestamp=16.08.2026 14:03:10\r\n")

func softKeys(t *testing.T) map[string]crypto.Signer {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	return map[string]crypto.Signer{"rsa2048": rsaKey, "p256": p256, "p384": p384}
}

// TestSignVerifies signs with software keys in every mode and hash, and has
// the signature checked by our Verify, by OpenSSL and by GnuTLS, with and
// without the CA.
func TestSignVerifies(t *testing.T) {
	ts := time.Now().UTC().Truncate(time.Second)
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := signertest.NewCert(t, caKey, signertest.CertOptions{CommonName: "test CA", IsCA: true})
	for name, key := range softKeys(t) {
		cert := signertest.NewCert(t, key, signertest.CertOptions{CommonName: name, Parent: ca, ParentKey: caKey})
		for _, h := range []crypto.Hash{crypto.SHA256, crypto.SHA384, crypto.SHA512} {
			for _, noAttrs := range []bool{false, true} {
				t.Run(name+"/"+h.String()+map[bool]string{true: "/no-attrs", false: "/attrs"}[noAttrs], func(t *testing.T) {
					der, err := signer.Sign(text, key, cert, signer.Options{Hash: h, NoSignedAttributes: noAttrs, SigningTime: ts, Chain: []*x509.Certificate{ca}})
					if err != nil {
						t.Fatal(err)
					}
					roots := x509.NewCertPool()
					roots.AddCert(ca)
					v, err := signer.Verify(der, text, roots)
					if err != nil {
						t.Fatalf("Verify: %v", err)
					}
					if v.SignedAttributes == noAttrs {
						t.Fatalf("SignedAttributes=%v", v.SignedAttributes)
					}
					if !noAttrs && !v.SigningTime.Equal(ts) {
						t.Fatalf("signingTime %v, want the text's %v", v.SigningTime, ts)
					}
					if !v.Signer.Equal(cert) {
						t.Fatal("wrong signer certificate")
					}
					signertest.RequireExternalVerify(t, der, text, cert, []*x509.Certificate{ca})
				})
			}
		}
	}
}

func TestVerifyRejects(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cert := signertest.NewCert(t, key, signertest.CertOptions{})
	der, err := signer.Sign(text, key, cert, signer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lf := bytes.ReplaceAll(text, []byte("\r\n"), []byte("\n"))
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other := signertest.NewCert(t, otherKey, signertest.CertOptions{})
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other)

	for _, tc := range []struct {
		name    string
		der     []byte
		content []byte
		roots   *x509.CertPool
	}{
		{"LF-only text", der, lf, nil},
		{"other content", der, []byte("x"), nil},
		{"untrusted signer", der, text, otherRoots},
		{"garbage", []byte{0x30, 0x03, 1, 2, 3}, text, nil},
		{"truncated", der[:len(der)-10], text, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := signer.Verify(tc.der, tc.content, tc.roots); !errors.Is(err, signer.ErrBadSignature) {
				t.Fatalf("err=%v, want ErrBadSignature", err)
			}
		})
	}
	if ok, _ := signertest.OpenSSLVerify(t, der, lf, nil); ok {
		t.Fatal("openssl accepted a signature over LF-only text")
	}
}

func TestSignRefusesUnsupported(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cert := signertest.NewCert(t, key, signertest.CertOptions{})
	if _, err := signer.Sign(text, key, cert, signer.Options{Hash: crypto.SHA1}); !errors.Is(err, signer.ErrUnsupported) {
		t.Fatalf("SHA-1: err=%v", err)
	}
	if _, err := signer.HashFromName("md5"); !errors.Is(err, signer.ErrUnsupported) {
		t.Fatalf("md5: err=%v", err)
	}
}

// TestSigningTimeIsTextSecond checks that signingTime is the text's second,
// in both of the encodings RFC 5652 prescribes.
func TestSigningTimeIsTextSecond(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cert := signertest.NewCert(t, key, signertest.CertOptions{
		NotBefore: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2060, 1, 1, 0, 0, 0, 0, time.UTC)})
	for _, ts := range []time.Time{
		time.Date(2016, 8, 16, 14, 3, 10, 999_000_000, time.UTC), // fraction dropped
		time.Date(2051, 1, 2, 3, 4, 5, 0, time.UTC),              // GeneralizedTime range
	} {
		der, err := signer.Sign(text, key, cert, signer.Options{SigningTime: ts})
		if err != nil {
			t.Fatal(err)
		}
		v, err := signer.Verify(der, text, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := ts.Truncate(time.Second); !v.SigningTime.Equal(want) {
			t.Fatalf("signingTime %v want %v", v.SigningTime, want)
		}
	}
}

// TestVerifyAcceptsOpenSSL checks Verify against signatures OpenSSL made, with
// and without signed attributes, as the maker's RSA clients send them.
func TestVerifyAcceptsOpenSSL(t *testing.T) {
	dir := t.TempDir()
	bin := signertest.NeedTool(t, "openssl")
	key := filepath.Join(dir, "k.pem")
	crt := filepath.Join(dir, "c.pem")
	if out, err := exec.Command(bin, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
		"-subj", "/CN=openssl signer", "-days", "2").CombinedOutput(); err != nil {
		t.Fatalf("openssl req: %v\n%s", err, out)
	}
	in := filepath.Join(dir, "text")
	if err := os.WriteFile(in, text, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{nil, {"-noattr"}} {
		sig := filepath.Join(dir, "sig.der")
		args := append([]string{"cms", "-sign", "-binary", "-in", in, "-signer", crt, "-inkey", key, "-outform", "DER", "-out", sig}, extra...)
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl cms -sign: %v\n%s", err, out)
		}
		der, _ := os.ReadFile(sig)
		v, err := signer.Verify(der, text, nil)
		if err != nil {
			t.Fatalf("Verify(openssl %v): %v", extra, err)
		}
		if v.SignedAttributes != (extra == nil) {
			t.Fatalf("SignedAttributes=%v for %v", v.SignedAttributes, extra)
		}
		if _, err := signer.Verify(der, bytes.ReplaceAll(text, []byte("\r\n"), []byte("\n")), nil); err == nil {
			t.Fatal("accepted OpenSSL's signature over LF-only text")
		}
	}
}

// nullSigner returns a fixed signature at once, so that BenchmarkEncode
// measures what signer adds on top of the key: hashing, attributes and DER.
type nullSigner struct{ crypto.Signer }

func (n nullSigner) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	return make([]byte, 256), nil
}

func BenchmarkEncode(b *testing.B) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	cert := signertest.NewCert(b, key, signertest.CertOptions{})
	ns := nullSigner{key}
	ts := time.Now()
	for _, noAttrs := range []bool{false, true} {
		b.Run(map[bool]string{false: "attrs", true: "no-attrs"}[noAttrs], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := signer.Sign(text, ns, cert, signer.Options{SigningTime: ts, NoSignedAttributes: noAttrs}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
