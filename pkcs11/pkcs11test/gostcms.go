package pkcs11test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/signer/signertest"
)

// GOSTFixtureDir is the directory of the committed GOST certificate-login
// fixtures: test keys and the challenges OpenSSL's gost engine made to
// their certificates (testdata/gostcms/README.md).
// GOSTFixture reads a committed fixture file.
// OpenSSLEncryptGOST has OpenSSL's gost engine seal content to cert as
// `openssl cms -encrypt -gost89` does (VKO, the CryptoPro key wrap, GOST
// 28147-89 CFB): with the engine's default content S-box (TC26-Z), or
// CryptoPro-A when cryptoProA is set. It returns the DER envelope.
// GOSTObjects is the number of session keys the GOST test module holds
// now (the module writes it to "objects" in its directory).
func (g *GOSTToken) GOSTObjects(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(g.Dir, "objects"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the module's objects file: %v", err)
	}
	return n
}

// NewGOSTFixture makes a GOST token with the committed fixture key of
// bits ("256" or "512") and its certificate, so that the committed
// envelopes open on it.
func NewGOSTFixture(t testing.TB, bits string, o gosttoken.Options) *GOSTToken {
	t.Helper()
	signertest.NeedTool(t, "certtool")
	signertest.NeedTool(t, "gcc")
	clearTokenEnv(t)
	n, _ := strconv.Atoi(bits)
	g := &GOSTToken{Token: gosttoken.Token{Dir: t.TempDir(), Bits: n, Label: "gost" + bits}}
	dir := signertest.GOSTFixtureDir(t)
	o.Cached = true
	pin, err := g.MakeWithKey("4321", filepath.Join(dir, "key"+bits+".pem"), filepath.Join(dir, "cert"+bits+".pem"), o)
	if err != nil {
		t.Fatalf("make the GOST fixture token: %v", err)
	}
	g.PIN = pin
	if g.Cert, err = pkcs11.ReadCertificate(g.CertFile()); err != nil {
		t.Fatal(err)
	}
	return g
}
