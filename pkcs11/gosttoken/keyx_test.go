package gosttoken

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The spec's known answers (gost-certlogin.md 2.4): an envelope OpenSSL's
// gost engine made to the certificate of the key in testdata/kat256-key.pem.
const (
	katKEK   = "8a97c433f64050c5e3db35dd59730b1c2da23576038a971426e9d1ce4fe2b1b3"
	katPlain = "01cad495d04b7d5b5fc52cc6c7142b281dce591987844b89dcbb1a4a10d8c987"
	katD     = "6E579F4EE53FE2E3A6252B64C934D83A5E8EA1F002069C0C6126B65548A58A92"
)

func katEnvelope(t *testing.T) envelope {
	der, err := os.ReadFile("testdata/kat256-envelope.der")
	if err != nil {
		t.Fatal(err)
	}
	return parseEnvelope(t, der)
}

// opens requires that the driver run succeeded and gave want, every
// session key destroyed.
func opens(t *testing.T, r run, want []byte) {
	t.Helper()
	if r.exit != 0 || !bytes.Equal(r.plain, want) {
		t.Fatalf("exit %d, plaintext %x, want %x:\n%s", r.exit, r.plain, want, r.out)
	}
	r.clean(t)
}

// TestKeyxKnownAnswer opens the spec's known-answer envelope by the three
// ways a token may offer: the derive with kdf 2012-256 then CKM_KDF_4357,
// the derive with kdf 4357, and the one-step build's CKM_GOSTR3410_KEY_WRAP.
func TestKeyxKnownAnswer(t *testing.T) {
	want, _ := hex.DecodeString(katPlain)
	e := katEnvelope(t)
	tok := fixtureToken(t, 256, Options{})
	r := drive(t, tok, e.pathA("a2")...)
	opens(t, r, want)
	// Three keys alive at the most (KEK, KEK', CEK), then none.
	if got := r.objects; len(got) != 7 || got[2] != 3 || got[5] != 0 {
		t.Errorf("objects counted %v, want 1 2 3 then down to 0", got)
	}
	if v := r.values["attrs"]; v != "class=0x4 type=0x32 sensitive=1 extractable=0 params=11" {
		t.Errorf("the KEK's attributes: %s", v)
	}
	if rv := r.rv("C_GetAttributeValue(CKA_VALUE)"); rv != rvAttributeSensitive {
		t.Errorf("CKA_VALUE of the KEK answered %s, want CKR_ATTRIBUTE_SENSITIVE", rv)
	}
	opens(t, drive(t, tok, e.pathA("a1")...), want)

	one := fixtureToken(t, 256, Options{OneStepUnwrap: true})
	opens(t, drive(t, one, e.pathB("-")...), want)
	opens(t, drive(t, one, e.pathB(hx(e.ukm))...), want)
}

// TestKeyxOpenSSLEnvelopes opens fresh `openssl cms -encrypt -gost89`
// envelopes, 256 and 512-bit keys, both content S-boxes, 32 bytes and 3000
// (across two key-meshing points), by every way.
func TestKeyxOpenSSLEnvelopes(t *testing.T) {
	for _, bits := range []int{256, 512} {
		tok := fixtureToken(t, bits, Options{})
		one := fixtureToken(t, bits, Options{OneStepUnwrap: true})
		for _, set := range []string{contentTC26Z, contentCryptoProA} {
			for _, n := range []int{32, 3000} {
				if n == 3000 && bits == 512 {
					continue // meshing is the content's, the same for both sizes
				}
				t.Run(fmt.Sprintf("%d-%s-%d", bits, map[string]string{contentTC26Z: "TC26-Z", contentCryptoProA: "CryptoPro-A"}[set], n), func(t *testing.T) {
					plain := random(t, n)
					e := parseEnvelope(t, opensslSeal(t, tok.CertFile(), plain, set))
					if len(e.eph) != bits/4 {
						t.Fatalf("OpenSSL's ephemeral key has %d bytes", len(e.eph))
					}
					opens(t, drive(t, tok, e.pathA("a2")...), plain)
					opens(t, drive(t, tok, e.pathA("a1")...), plain)
					opens(t, drive(t, one, e.pathB("-")...), plain)
				})
			}
		}
	}
}

// TestKeyxNettle checks the module's KEK against a second implementation,
// nettle's gostdsa_vko + Streebog-256: the driver wraps a random key under
// nettle's KEK and the module unwraps it (IMIT checked) under its own.
func TestKeyxNettle(t *testing.T) {
	tok := fixtureToken(t, 256, Options{})
	dfile := filepath.Join(t.TempDir(), "d")
	os.WriteFile(dfile, []byte(katD+"\n"), 0o600)
	e := katEnvelope(t)
	r := drive(t, tok, "vko", hx(e.eph), hx(e.ukm), dfile)
	if r.values["nettle-kek"] != katKEK {
		t.Errorf("nettle's KEK %s, the spec's %s", r.values["nettle-kek"], katKEK)
	}
	sent, _ := hex.DecodeString(r.values["sent"])
	opens(t, r, sent)

	// A 512-bit key, the ephemeral key OpenSSL made; its scalar from certtool.
	tok512 := fixtureToken(t, 512, Options{})
	e = parseEnvelope(t, opensslSeal(t, tok512.CertFile(), random(t, 32), contentTC26Z))
	os.WriteFile(dfile, []byte(privateScalar(t, tok512.KeyFile())+"\n"), 0o600)
	r = drive(t, tok512, "vko", hx(e.eph), hx(e.ukm), dfile)
	sent, _ = hex.DecodeString(r.values["sent"])
	opens(t, r, sent)
}

// TestKeyxMechanisms: what each build lists, the private key's attributes.
func TestKeyxMechanisms(t *testing.T) {
	for _, tc := range []struct {
		o        Options
		has, not []string
		attrs    string
	}{
		{Options{}, []string{mechDerive + " flags 0x80001", mechKDF4357 + " flags 0x80001", mechKeyWrap + " flags 0x40001", mechDecrypt + " flags 0x201"},
			[]string{mechOneStep}, "derive=1 unwrap=0"},
		{Options{OneStepUnwrap: true}, []string{mechOneStep + " flags 0x40001", mechDecrypt + " flags 0x201"},
			[]string{mechDerive, mechKDF4357, mechKeyWrap}, "derive=1 unwrap=1"},
	} {
		r := drive(t, fixtureToken(t, 256, tc.o), "mechs")
		for _, m := range tc.has {
			if !strings.Contains(r.out, "mech "+m+"\n") {
				t.Errorf("%+v: %s not listed:\n%s", tc.o, m, r.out)
			}
		}
		for _, m := range tc.not {
			if strings.Contains(r.out, "mech "+m+" ") {
				t.Errorf("%+v: %s listed:\n%s", tc.o, m, r.out)
			}
		}
		if r.values["private"] != tc.attrs {
			t.Errorf("%+v: private key %s, want %s", tc.o, r.values["private"], tc.attrs)
		}
		if rv := r.rv("C_DestroyObject(private)"); rv != rvActionProhibited {
			t.Errorf("destroying the private key answered %s, want CKR_ACTION_PROHIBITED", rv)
		}
	}
}
