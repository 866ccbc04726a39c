package emulator

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/emulator/directory"
	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/signer/signertest"
)

// gostCert makes a GOST key with OpenSSL's gost engine and its self-signed
// certificate; it returns the files and the certificate.
func gostCert(t *testing.T, conf string, bits int) (keyFile, certFile string, cert *x509.Certificate) {
	t.Helper()
	dir := t.TempDir()
	keyFile, certFile = filepath.Join(dir, "key.pem"), filepath.Join(dir, "cert.pem")
	for _, args := range [][]string{
		{"genpkey", "-algorithm", fmt.Sprintf("gost2012_%d", bits), "-pkeyopt", "paramset:A", "-out", keyFile},
		{"req", "-new", "-x509", "-key", keyFile, "-out", certFile, "-days", "2", fmt.Sprintf("-md_gost12_%d", bits), "-subj", "/CN=carol"},
	} {
		cmd := exec.Command(signertest.NeedTool(t, "openssl"), args...)
		cmd.Env = append(os.Environ(), "OPENSSL_CONF="+conf)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("openssl %s: %v\n%s", args[0], err, out)
		}
	}
	cert, err := pkcs11.ReadCertificate(certFile)
	if err != nil {
		t.Fatal(err)
	}
	return keyFile, certFile, cert
}

// A user's GOST certificate (256 and 512 bits) logs in: the emulator's
// challenge is GOST key transport with the configured content S-box, and
// `openssl cms -decrypt` with the gost engine and the certificate's key,
// nobody here's code, opens it to the random AuthenticateConfirm takes.
func TestV3CertificateChallengeGOST(t *testing.T) {
	t.Parallel()
	conf := signertest.GOSTEngineConf(t)
	for _, bits := range []int{256, 512} {
		keyFile, certFile, cert := gostCert(t, conf, bits)
		thumb := directory.Thumbprint(cert.Raw)
		for _, sbox := range []string{"", "TC26-Z"} {
			t.Run(fmt.Sprintf("%d %q", bits, sbox), func(t *testing.T) {
				b := newLegacyBed(t, false, func(c *Config) {
					c.GOSTContentSBox = sbox
					c.Users = append(c.Users, User{ID: "carol", Thumbprints: []string{thumb}})
				})
				a := b.post(t, "/V3/Authenticate?type=certificate", devHeader, "application/octet-stream", cert.Raw)
				if a.status != 200 {
					t.Fatalf("%d %s", a.status, a.body)
				}
				want := gost.SBoxCryptoProA.OID
				if sbox == "TC26-Z" {
					want = gost.SBoxTC26Z.OID
				}
				// signagent's own reader of a challenge takes it, and names
				// the S-box.
				tr, err := envelope.GOSTTransport(a.body, cert)
				if err != nil {
					t.Fatalf("envelope.GOSTTransport: %v", err)
				}
				if wantDER, _ := asn1.Marshal(want); !bytes.Equal(tr.ContentParamSet, wantDER) || tr.Bits != bits {
					t.Fatalf("content S-box %x, want %v; %d bits", tr.ContentParamSet, want, tr.Bits)
				}
				dir := t.TempDir()
				in, out := filepath.Join(dir, "challenge.der"), filepath.Join(dir, "random")
				os.WriteFile(in, a.body, 0o600)
				cmd := exec.Command(signertest.NeedTool(t, "openssl"), "cms", "-decrypt", "-binary", "-inform", "DER", "-in", in,
					"-recip", certFile, "-inkey", keyFile, "-out", out, "-debug_decrypt")
				cmd.Env = append(os.Environ(), "OPENSSL_CONF="+conf)
				if o, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("openssl cms -decrypt: %v\n%s", err, o)
				}
				random, _ := os.ReadFile(out)
				if len(random) != 32 {
					t.Fatalf("the random is %d bytes", len(random))
				}
				tok := b.confirm(t, thumb, random).token(t)
				if user, ref := b.s.legacy.User(authHeader(testDevKey, tok)); ref != nil || user != "carol" {
					t.Fatalf("the token is %q's, %v", user, ref)
				}
			})
		}
	}
}

// A certificate that is neither RSA nor GOST (ECDSA) is refused with the
// reason, and a content S-box other than CryptoPro-A or TC26-Z is a
// configuration error.
func TestV3CertificateNeitherRSANorGOST(t *testing.T) {
	t.Parallel()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "ec"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	b := newLegacyBed(t, false)
	b.post(t, "/V3/Authenticate?type=certificate", devHeader, "application/octet-stream", der).
		want(t, 400, CodeBadRequest, "RSA and GOST R 34.10-2012 certificates only (not a GOST R 34.10-2012 key")
	for _, s := range []string{"CryptoPro-B", "tc26-z", "Z"} {
		cfg := Config{Developers: []Developer{{Key: "k-1"}}, GOSTContentSBox: s}
		if _, err := New(&cfg, zerolog.Nop()); err == nil {
			t.Errorf("gostContentSBox %q: accepted", s)
		}
	}
}
