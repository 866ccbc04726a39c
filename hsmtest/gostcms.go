package hsmtest

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/signagent/signagent/internal/gosttoken"
	"github.com/signagent/signagent/pkcs11"
)

// GOSTFixtureDir is the directory of the committed GOST certificate-login
// fixtures: test keys and the challenges OpenSSL's gost engine made to
// their certificates (testdata/gostcms/README.md).
func GOSTFixtureDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "testdata", "gostcms")
}

// GOSTFixture reads a committed fixture file.
func GOSTFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(GOSTFixtureDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// OpenSSLEncryptGOST has OpenSSL's gost engine seal content to cert as
// `openssl cms -encrypt -gost89` does (VKO, the CryptoPro key wrap, GOST
// 28147-89 CFB): with the engine's default content S-box (TC26-Z), or
// CryptoPro-A when cryptoProA is set. It returns the DER envelope.
func OpenSSLEncryptGOST(t testing.TB, content []byte, cert *x509.Certificate, cryptoProA bool) []byte {
	t.Helper()
	NeedTool(t, "openssl")
	conf := GOSTEngineConf(t)
	if cryptoProA {
		b, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		conf = writeTemp(t, "gost-a.cnf", []byte(strings.Replace(string(b), "default_algorithms = ALL\n",
			"default_algorithms = ALL\nCRYPT_PARAMS = id-Gost28147-89-CryptoPro-A-ParamSet\n", 1)))
	}
	dir := t.TempDir()
	in, certFile, out := filepath.Join(dir, "in"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "env.der")
	if err := os.WriteFile(in, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("openssl", "cms", "-encrypt", "-binary", "-in", in, "-outform", "DER", "-out", out, "-gost89", certFile)
	cmd.Env = append(os.Environ(), "OPENSSL_CONF="+conf)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("openssl cms -encrypt -gost89: %v\n%s", err, b)
	}
	der, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

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
	NeedTool(t, "certtool")
	NeedTool(t, "gcc")
	clearTokenEnv(t)
	n, _ := strconv.Atoi(bits)
	g := &GOSTToken{Token: gosttoken.Token{Dir: t.TempDir(), Bits: n, Label: "gost" + bits}}
	dir := GOSTFixtureDir(t)
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
