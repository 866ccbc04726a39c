package pkcs11test

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/signer/signertest"
)

// GOST card faults: the GOST test module made to look like a 256-bit GOST
// key on a card behind OpenSC's opensc-pkcs11.so (gost-card-opensc.md):
// only the raw CKM_GOSTR3410, and the certificate (and the public key
// object) not shown.
var (
	GOSTCardLike         = []string{"raw-mechanism-only"}
	GOSTCardNoCert       = []string{"raw-mechanism-only", "no-certificate"}
	GOSTCardNoCertNoPub  = []string{"raw-mechanism-only", "no-certificate", "no-public-key"}
	GOSTNoMechanismAtAll = []string{"raw-mechanism-only", "no-sign-mechanisms"}
)

// GOST2001Certificate writes a self-signed GOST R 34.10-2001 certificate
// (CryptoPro-A) made by OpenSSL's gost engine and returns its path: a
// certificate of the algorithm the service no longer takes.
func GOST2001Certificate(t testing.TB) string {
	t.Helper()
	bin := signertest.NeedTool(t, "openssl")
	dir := t.TempDir()
	cert := filepath.Join(dir, "cert2001.pem")
	cmd := exec.Command(bin, "req", "-x509", "-newkey", "gost2001", "-pkeyopt", "paramset:A", "-subj", "/CN=old GOST-2001 key",
		"-nodes", "-keyout", filepath.Join(dir, "key2001.pem"), "-out", cert, "-days", "30")
	cmd.Env = append(os.Environ(), "OPENSSL_CONF="+signertest.GOSTEngineConf(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("openssl could not make a GOST-2001 certificate: %v\n%s", err, out)
	}
	return cert
}

// ExpiredCertificate writes a certificate for the token's own key that
// expired in 2021 (certtool) and returns its path.
func (g *GOSTToken) ExpiredCertificate(t testing.TB) string {
	t.Helper()
	bin := signertest.NeedTool(t, "certtool")
	dir := t.TempDir()
	tmpl, cert := filepath.Join(dir, "tmpl"), filepath.Join(dir, "expired.pem")
	body := "cn = \"expired GOST certificate\"\nserial = 7\nactivation_date = \"2020-01-01 00:00:00 UTC\"\nexpiration_date = \"2021-01-01 00:00:00 UTC\"\nsigning_key\n"
	if err := os.WriteFile(tmpl, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "--generate-self-signed", "--load-privkey", g.KeyFile(), "--template", tmpl, "--outfile", cert).CombinedOutput(); err != nil {
		t.Fatalf("certtool: %v\n%s", err, out)
	}
	return cert
}

// GOSTCertificateFor issues a GOST R 34.10-2012 256-bit certificate for
// pub (a card's key, which never leaves the card) from a test CA of
// GnuTLS's (certtool, a gost12-256 CA key), valid for a year, and writes
// it to a PEM file in a test directory: what a user gets from a CA for a
// key their card generated, kept outside the card because OpenSC does not
// show a GOST-2012 certificate stored on it.
func GOSTCertificateFor(t testing.TB, pub *gost.PublicKey, cn string) (string, *x509.Certificate) {
	t.Helper()
	bin := signertest.NeedTool(t, "certtool")
	dir := t.TempDir()
	type algo struct {
		Algorithm asn1.ObjectIdentifier
		Params    struct{ Set, Digest asn1.ObjectIdentifier }
	}
	value, err := asn1.Marshal(pub.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	spki, err := asn1.Marshal(struct {
		Algorithm algo
		Key       asn1.BitString
	}{algo{gost.OIDPublicKey256, struct{ Set, Digest asn1.ObjectIdentifier }{pub.Curve.OID, gost.OIDDigest256}}, asn1.BitString{Bytes: value, BitLength: 8 * len(value)}})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pubFile := write("pub.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: spki}))
	caKey, caCert, cert := filepath.Join(dir, "ca.key"), filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem")
	caTmpl := write("ca.tmpl", []byte("cn = \"signagent test GOST CA\"\nserial = 1\nexpiration_days = 365\nca\ncert_signing_key\n"))
	tmpl := write("cert.tmpl", []byte(fmt.Sprintf("cn = %q\nserial = 2\nexpiration_days = 365\nsigning_key\n", cn)))
	for _, args := range [][]string{
		{"--generate-privkey", "--key-type", "gost12-256", "--outfile", caKey},
		{"--generate-self-signed", "--load-privkey", caKey, "--template", caTmpl, "--outfile", caCert},
		{"--generate-certificate", "--load-pubkey", pubFile, "--load-ca-privkey", caKey, "--load-ca-certificate", caCert, "--template", tmpl, "--outfile", cert},
	} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("certtool %s: %v\n%s", args[0], err, out)
		}
	}
	c, err := pkcs11.ReadCertificate(cert)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := gost.PublicKeyOf(c); err != nil || !got.Equal(pub) {
		t.Fatalf("the certificate certtool issued is not for the card's key: %v", err)
	}
	return cert, c
}
