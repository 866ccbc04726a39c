package gosttoken

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeWithKey: a given key of the wrong size, a certificate of another
// key or a file that is not a key is refused with one line, and no module
// is built; OpenSSL's PKCS#8 key is the fixtures' (the other tests use it).
func TestMakeWithKey(t *testing.T) {
	other := Token{Dir: t.TempDir(), Bits: 256}
	if _, err := other.Make("", Options{}); err != nil {
		t.Fatal(err)
	}
	notKey := filepath.Join(t.TempDir(), "key.pem")
	os.WriteFile(notKey, []byte("not a key\n"), 0o600)
	for _, tc := range []struct {
		name       string
		bits       int
		key, cert  string
		wantInLine string
	}{
		{"512 asked, 256 given", 512, "testdata/kat256-key.pem", "testdata/kat256-cert.pem", "is not a GOST R 34.10-2012 512-bit key"},
		{"another key's certificate", 256, "testdata/kat256-key.pem", other.CertFile(), "is not the key testdata/kat256-key.pem's"},
		{"not a key", 256, notKey, "testdata/kat256-cert.pem", "GnuTLS cannot read the key"},
		{"no such file", 256, "testdata/none.pem", "testdata/kat256-cert.pem", "no such file"},
	} {
		tok := Token{Dir: t.TempDir(), Bits: tc.bits}
		_, err := tok.MakeWithKey("1234", tc.key, tc.cert, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.wantInLine) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", tc.name, err, tc.wantInLine)
		}
		if _, err := os.Stat(tok.Module()); err == nil {
			t.Errorf("%s: a module was built", tc.name)
		}
	}
	tok := fixtureToken(t, 256, Options{})
	if fi, err := os.Stat(tok.KeyFile()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the key file: %v, mode %v", err, fi.Mode())
	}
}
