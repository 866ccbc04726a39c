package pkcs11test

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
	"github.com/signagent/signagent/signer/signertest"
)

// GOSTToken is a GOST R 34.10-2012 test token: the test module of
// pkcs11/gosttoken (built here with gcc, signing with GnuTLS), because no
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
	signertest.NeedTool(t, "certtool")
	signertest.NeedTool(t, "gcc")
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
	return pkcs11.Selection{Module: g.Module(), Token: tokeninfo.TokenSelector{Label: g.Label}, KeyLabel: g.Label,
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
// OpenSSLVerifyGOST runs `openssl cms -verify` with the gost engine.
// RequireGOSTExternalVerify asserts that GnuTLS and OpenSSL with the gost
// engine accept a GOST signature over content, with and without the
// certificate as trusted CA, and that both reject it over a changed text.
