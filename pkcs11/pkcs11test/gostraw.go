package pkcs11test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

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
