package hsmtest

import (
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/signagent/signagent/internal/gosttoken"
	"github.com/signagent/signagent/pkcs11"
)

// GOSTToken is a GOST R 34.10-2012 test token: the test module of
// internal/gosttoken (built here with gcc, signing with GnuTLS), because no
// software PKCS#11 token implements GOST.
type GOSTToken struct {
	gosttoken.Token
	PIN  string
	Cert *x509.Certificate
}

// NewGOST makes a GOST token with a key of bits (256 or 512); o.RawOnly
// builds the module without the hashing signature mechanisms.
func NewGOST(t testing.TB, bits int, o gosttoken.Options) *GOSTToken {
	t.Helper()
	NeedTool(t, "certtool")
	NeedTool(t, "gcc")
	clearTokenEnv(t)
	g := &GOSTToken{Token: gosttoken.Token{Dir: t.TempDir(), Bits: bits, Label: "gost" + strconv.Itoa(bits)}}
	o.Cached = true // one build per test binary, copied into each token
	pin, err := g.Make("4321", o)
	if err != nil {
		t.Fatalf("make the GOST test token: %v", err)
	}
	g.PIN = pin
	if g.Cert, err = pkcs11.ReadCertificate(g.CertFile()); err != nil {
		t.Fatal(err)
	}
	return g
}

// Selection selects the token's key with its PIN file.
func (g *GOSTToken) Selection() pkcs11.Selection {
	return pkcs11.Selection{Module: g.Module(), Token: pkcs11.TokenSelector{Label: g.Label}, KeyLabel: g.Label,
		PIN: pkcs11.PINSource{File: g.PINFile()}}
}

// Tries is the count of wrong PINs the token has recorded.
func (g *GOSTToken) Tries(t testing.TB) int {
	b, err := os.ReadFile(filepath.Join(g.Dir, "tries"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// GOSTEngineConf writes an OpenSSL configuration that loads Debian's gost
// engine (libengine-gost-openssl) for every algorithm, as gost.md shows.
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

// OpenSSLVerifyGOST runs `openssl cms -verify` with the gost engine.
func OpenSSLVerifyGOST(t testing.TB, der, content []byte, ca []*x509.Certificate) (ok bool, output string) {
	t.Helper()
	return opensslVerify(t, der, content, ca, []string{"OPENSSL_CONF=" + GOSTEngineConf(t)})
}

// RequireGOSTExternalVerify asserts that GnuTLS and OpenSSL with the gost
// engine accept a GOST signature over content, with and without the
// certificate as trusted CA, and that both reject it over a changed text.
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
