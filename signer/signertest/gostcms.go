package signertest

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// GOSTFixtureDir is the directory of the GOST CMS fixtures
// (testdata/gostcms beside this file).
func GOSTFixtureDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "testdata", "gostcms")
}

// GOSTFixture is the fixture file name's bytes.
func GOSTFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(GOSTFixtureDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// OpenSSLEncryptGOST seals content to cert with openssl cms -encrypt and
// the gost engine (the CryptoPro-A S-box when cryptoProA, else TC26-Z),
// as a GOST service would, and returns the DER.
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
