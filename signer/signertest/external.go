package signertest

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// PEM encodes certificates as PEM.
func PEM(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// NeedTool fails the test when an external program is missing: `make test`
// installs every one of them, so a missing tool is a broken set-up, not a
// reason to skip.
func NeedTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed; `make test` installs it (apt-get install openssl gnutls-bin opensc softhsm2)", name)
	}
	return p
}

func writeTemp(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// OpenSSLVerify runs `openssl cms -verify -binary` on a detached DER
// signature. With ca == nil the certificate chain is not checked
// (-noverify); otherwise the signer must chain to ca. It returns OpenSSL's
// error output when verification fails.
func OpenSSLVerify(t testing.TB, der, content []byte, ca []*x509.Certificate) (ok bool, output string) {
	t.Helper()
	return opensslVerify(t, der, content, ca, nil)
}

// opensslVerify runs `openssl cms -verify` with extra environment (the
// gost engine's configuration).
func opensslVerify(t testing.TB, der, content []byte, ca []*x509.Certificate, env []string) (ok bool, output string) {
	t.Helper()
	bin := NeedTool(t, "openssl")
	args := []string{"cms", "-verify", "-binary", "-inform", "DER",
		"-in", writeTemp(t, "sig.der", der), "-content", writeTemp(t, "content", content), "-out", os.DevNull}
	if ca == nil {
		args = append(args, "-noverify")
	} else {
		args = append(args, "-CAfile", writeTemp(t, "ca.pem", PEM(ca...)), "-purpose", "any")
	}
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.CombinedOutput()
	return err == nil, string(out)
}

// GnuTLSVerify runs `certtool --p7-verify` on a detached DER signature. With
// ca == nil the signature is checked against the signer's own certificate
// (--load-certificate); otherwise the signer must chain to ca
// (--load-ca-certificate).
func GnuTLSVerify(t testing.TB, der, content []byte, signerCert *x509.Certificate, ca []*x509.Certificate) (ok bool, output string) {
	t.Helper()
	bin := NeedTool(t, "certtool")
	args := []string{"--p7-verify", "--inder", "--infile", writeTemp(t, "sig.der", der),
		"--load-data", writeTemp(t, "content", content)}
	if ca == nil {
		args = append(args, "--load-certificate", writeTemp(t, "signer.pem", PEM(signerCert)))
	} else {
		args = append(args, "--load-ca-certificate", writeTemp(t, "ca.pem", PEM(ca...)))
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	return err == nil, string(out)
}

// RequireExternalVerify asserts that both OpenSSL and GnuTLS accept the
// signature, with and without the CA.
func RequireExternalVerify(t testing.TB, der, content []byte, signerCert *x509.Certificate, ca []*x509.Certificate) {
	t.Helper()
	for _, withCA := range []bool{false, true} {
		var roots []*x509.Certificate
		if withCA {
			roots = ca
		}
		if ok, out := OpenSSLVerify(t, der, content, roots); !ok {
			t.Fatalf("openssl cms -verify (CA=%v) rejected the signature:\n%s", withCA, out)
		}
		if ok, out := GnuTLSVerify(t, der, content, signerCert, roots); !ok {
			t.Fatalf("certtool --p7-verify (CA=%v) rejected the signature:\n%s", withCA, out)
		}
	}
}
