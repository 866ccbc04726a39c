package signertest

import (
	"crypto/x509"
	"os/exec"
	"strings"
	"testing"
)

// GOSTEngineConf is an OpenSSL configuration file loading the gost
// engine (libengine-gost-openssl); the test fails when it is missing.
func GOSTEngineConf(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("dpkg", "-L", "libengine-gost-openssl").Output()
	so := ""
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasSuffix(l, "/engines-3/gost.so") {
			so = l
		}
	}
	if err != nil || so == "" {
		t.Fatalf("the gost engine is not installed; `make test` installs it (apt-get install libengine-gost-openssl)")
	}
	conf := "openssl_conf = openssl_def\n[openssl_def]\nengines = engine_section\n[engine_section]\ngost = gost_section\n" +
		"[gost_section]\nengine_id = gost\ndynamic_path = " + so + "\ndefault_algorithms = ALL\n"
	return writeTemp(t, "gost.cnf", []byte(conf))
}

// OpenSSLVerifyGOST verifies a GOST CMS signature with openssl cms and
// the gost engine, trusting ca, and returns its output.
func OpenSSLVerifyGOST(t testing.TB, der, content []byte, ca []*x509.Certificate) (ok bool, output string) {
	t.Helper()
	return opensslVerify(t, der, content, ca, []string{"OPENSSL_CONF=" + GOSTEngineConf(t)})
}

// RequireGOSTExternalVerify fails the test unless GnuTLS and OpenSSL
// (gost engine) both verify the GOST signature der over content, with
// and without cert as the CA, and both refuse it over changed content.
func RequireGOSTExternalVerify(t testing.TB, der, content []byte, cert *x509.Certificate) {
	t.Helper()
	for _, ca := range [][]*x509.Certificate{nil, {cert}} {
		if ok, out := GnuTLSVerify(t, der, content, cert, ca); !ok {
			t.Fatalf("certtool --p7-verify (CA=%v) rejected the GOST signature:\n%s", ca != nil, out)
		}
		if ok, out := OpenSSLVerifyGOST(t, der, content, ca); !ok {
			t.Fatalf("openssl cms -verify -engine gost (CA=%v) rejected the GOST signature:\n%s", ca != nil, out)
		}
	}
	changed := append([]byte("x"), content...)
	if ok, out := GnuTLSVerify(t, der, changed, cert, nil); ok {
		t.Fatalf("certtool accepted the GOST signature over a changed text:\n%s", out)
	}
	if ok, out := OpenSSLVerifyGOST(t, der, changed, nil); ok {
		t.Fatalf("openssl accepted the GOST signature over a changed text:\n%s", out)
	}
}
