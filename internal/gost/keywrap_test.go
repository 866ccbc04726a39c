package gost

import (
	"bytes"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"math/big"
	"testing"
)

// The known answers of gost-certlogin.md section 2.4: an envelope OpenSSL's
// gost engine made to a 2012-256 key on the CryptoPro-A curve (wrap S-box
// TC26-Z, content S-box CryptoPro-A), opened byte-exact by libgcrypt.
const (
	katD         = "6E579F4EE53FE2E3A6252B64C934D83A5E8EA1F002069C0C6126B65548A58A92"
	katEnvelope  = "MIIBdwYJKoZIhvcNAQcDoIIBaDCCAWQCAQAxggEPMIIBCwIBADA2MB4xHDAaBgNVBAMME0dPU1QgdGVzdCByZWNpcGllbnQCFBKst94CC0trhk5qtiX6cEsfQpeJMB8GCCqFAwcBAQEBMBMGByqFAwICIwEGCCqFAwcBAQICBIGsMIGpMCgEIAShtOMw05svF8UAOTdWeVadk2H7ju3bY/q5t+9aKNbIBAR+tBvZoH0GCSqFAwcBAgUBAaBmMB8GCCqFAwcBAQEBMBMGByqFAwICIwEGCCqFAwcBAQICA0MABEAq3ld56EMcHqjegtYfc1hFF3i/67HR9p15aG49e1yet3VyzRXFRSlO6//dzwsxFDvKH4oGgHbhkPWCI259yUafBAhb8B6tP13RozBMBgkqhkiG9w0BBwEwHQYGKoUDAgIVMBMECOnuDWvKZHGNBgcqhQMCAh8BgCCUM8WWxN/8gtOytoIzA16t7OWz1Ra/XrFGR0pjhN9Cvg=="
	katEphX      = "2ade5779e8431c1ea8de82d61f7358451778bfebb1d1f69d79686e3d7b5c9eb7"
	katEphY      = "7572cd15c545294eebffddcf0b31143bca1f8a068076e190f582236e7dc9469f"
	katUKM       = "5bf01ead3f5dd1a3"
	katKEK       = "8a97c433f64050c5e3db35dd59730b1c2da23576038a971426e9d1ce4fe2b1b3"
	katKEKDiv    = "873d204d0f92fb1ef5c43a792fb2200bbc5bff7bc07f2a846474a25d3ab46929"
	katCEK       = "b09a32f7f1e76062138adfa22e76fa28ad305e68cb785701746db2380c408b16"
	katIMIT      = "7eb41bd9"
	katIV        = "e9ee0d6bca64718d"
	katPlaintext = "01cad495d04b7d5b5fc52cc6c7142b281dce591987844b89dcbb1a4a10d8c987"
)

// katParts reads what the checks need from the envelope (test-only
// parsing: the envelope package owns the real one).
type katParts struct {
	encKey, mac, ukm, ephemeral, wrapSet, iv, contentSet, ct []byte
}

func readKAT(t *testing.T) katParts {
	t.Helper()
	der, _ := base64.StdEncoding.DecodeString(katEnvelope)
	var ci struct {
		Type    asn1.ObjectIdentifier
		Content struct {
			Version    int
			Recipients []struct {
				Version int
				RID     asn1.RawValue
				Alg     asn1.RawValue
				Key     []byte
			} `asn1:"set"`
			EncryptedContent struct {
				Type asn1.ObjectIdentifier
				Alg  struct {
					OID    asn1.ObjectIdentifier
					Params struct {
						IV  []byte
						Set asn1.ObjectIdentifier
					}
				}
				Content []byte `asn1:"tag:0"`
			}
		} `asn1:"explicit,tag:0"`
	}
	if rest, err := asn1.Unmarshal(der, &ci); err != nil || len(rest) != 0 {
		t.Fatalf("the KAT envelope: %v", err)
	}
	var kt struct {
		Session struct {
			Key []byte
			MAC []byte
		}
		Params struct {
			Set       asn1.ObjectIdentifier
			Ephemeral asn1.RawValue `asn1:"tag:0"`
			UKM       []byte
		} `asn1:"tag:0"`
	}
	if _, err := asn1.Unmarshal(ci.Content.Recipients[0].Key, &kt); err != nil {
		t.Fatalf("the KAT's GostR3410-KeyTransport: %v", err)
	}
	spki := append([]byte{0x30}, kt.Params.Ephemeral.FullBytes[1:]...) // [0] IMPLICIT SEQUENCE
	eph, err := ParsePublicKeyInfo(spki)
	if err != nil {
		t.Fatalf("the KAT's ephemeral key: %v", err)
	}
	wrapSet, _ := asn1.Marshal(kt.Params.Set)
	contentSet, _ := asn1.Marshal(ci.Content.EncryptedContent.Alg.Params.Set)
	return katParts{encKey: kt.Session.Key, mac: kt.Session.MAC, ukm: kt.Params.UKM, ephemeral: eph.Bytes(),
		wrapSet: wrapSet, iv: ci.Content.EncryptedContent.Alg.Params.IV, contentSet: contentSet, ct: ci.Content.EncryptedContent.Content}
}

// Each step of CryptoPro key transport against the known answers: VKO of
// the recipient's key and the envelope's ephemeral key is the KEK, its
// diversification KEK', the wrap of the CEK the envelope's encrypted key
// and MAC, the CFB encryption of the plaintext the envelope's content.
func TestKnownAnswersOfTheSpec(t *testing.T) {
	p := readKAT(t)
	if hex.EncodeToString(p.ephemeral) != katEphX+katEphY || hex.EncodeToString(p.ukm) != katUKM || hex.EncodeToString(p.iv) != katIV {
		t.Fatalf("the envelope does not hold the spec's values: eph %x ukm %x iv %x", p.ephemeral, p.ukm, p.iv)
	}
	wrap, content := SBoxTC26Z, SBoxCryptoProA
	if !bytes.Equal(p.wrapSet, mustMarshal(wrap.OID)) || !bytes.Equal(p.contentSet, mustMarshal(content.OID)) {
		t.Fatal("the envelope's S-boxes are not TC26-Z (wrap) and CryptoPro-A (content)")
	}
	curve := CurveByOID(asn1.ObjectIdentifier{1, 2, 643, 2, 2, 35, 1})
	eph, err := NewPublicKey(curve, p.ephemeral)
	if err != nil {
		t.Fatal(err)
	}
	d := hexInt(katD)
	kek, err := VKO256(d, eph, p.ukm)
	if err != nil || hex.EncodeToString(kek) != katKEK {
		t.Fatalf("VKO = %x, %v; want %s", kek, err, katKEK)
	}
	div, err := Diversify(kek, p.ukm, wrap)
	if err != nil || hex.EncodeToString(div) != katKEKDiv {
		t.Fatalf("KEK' = %x, %v; want %s", div, err, katKEKDiv)
	}
	cek := unhex(katCEK)
	enc, mac, err := WrapCryptoPro(kek, p.ukm, cek, wrap)
	if err != nil || !bytes.Equal(enc, p.encKey) || !bytes.Equal(mac, p.mac) || hex.EncodeToString(mac) != katIMIT {
		t.Fatalf("wrap = %x %x, %v; the envelope has %x %x", enc, mac, err, p.encKey, p.mac)
	}
	// The test-only unwrap: ECB decryption under KEK' gives the CEK back.
	c, _ := NewCipher(div, wrap)
	back := make([]byte, 32)
	for i := 0; i < 32; i += 8 {
		c.Decrypt(back[i:], p.encKey[i:])
	}
	if !bytes.Equal(back, cek) {
		t.Fatalf("unwrap = %x", back)
	}
	e, err := NewCFBEncrypter(cek, p.iv, content, true)
	if err != nil {
		t.Fatal(err)
	}
	ct := make([]byte, len(katPlaintext)/2)
	e.XORKeyStream(ct, unhex(katPlaintext))
	if !bytes.Equal(ct, p.ct) {
		t.Fatalf("CFB = %x, the envelope has %x", ct, p.ct)
	}
	if got := decryptCFB(t, cek, p.iv, p.ct, content, true); hex.EncodeToString(got) != katPlaintext {
		t.Fatalf("decrypted %x", got)
	}
	// The wrong choices a reader could make do not give the answers: the
	// wrap under the content's S-box, the UKM read big-endian, Streebog-512.
	if enc2, _, _ := WrapCryptoPro(kek, p.ukm, cek, content); bytes.Equal(enc2, p.encKey) {
		t.Error("the wrap under CryptoPro-A gave the envelope's key")
	}
	if k2, _ := VKO256(d, eph, reversed(p.ukm)); bytes.Equal(k2, kek) {
		t.Error("the UKM read big-endian gave the KEK")
	}
}

func mustMarshal(v any) []byte {
	b, err := asn1.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Diversify and the wrap refuse keys and UKMs of the wrong length.
func TestWrapInputs(t *testing.T) {
	k, u := make([]byte, 32), make([]byte, 8)
	for name, f := range map[string]func() error{
		"short KEK":  func() error { _, err := Diversify(k[:31], u, SBoxTC26Z); return err },
		"long UKM":   func() error { _, err := Diversify(k, make([]byte, 16), SBoxTC26Z); return err },
		"short CEK":  func() error { _, _, err := WrapCryptoPro(k, u, k[:16], SBoxTC26Z); return err },
		"no S-box":   func() error { _, _, err := WrapCryptoPro(k, u, k, nil); return err },
		"7-byte UKM": func() error { _, _, err := WrapCryptoPro(k, u[:7], k, SBoxTC26Z); return err },
	} {
		if f() == nil {
			t.Errorf("%s: taken", name)
		}
	}
}

// RFC 7836 appendix A.1: VKO_GOSTR3410_2012_256 on the 512-bit curve
// TC26-512-A, keys and UKM as the RFC prints them (little-endian byte
// strings); both sides reach the same KEK.
func TestVKORFC7836(t *testing.T) {
	c := CurveByOID(asn1.ObjectIdentifier{1, 2, 643, 7, 1, 2, 1, 2, 1})
	ukm := unhex("1d80603c8544c727")
	dA := new(big.Int).SetBytes(reversed(unhex("c990ecd972fce84ec4db022778f50fcac726f46708384b8d458304962d7147f8c2db41cef22c90b102f2968404f9b9be6d47c79692d81826b32b8daca43cb667")))
	dB := new(big.Int).SetBytes(reversed(unhex("48c859f7b6f11585887cc05ec6ef1390cfea739b1a18c0d4662293ef63b79e3b8014070b44918590b4b996acfea4edfbbbcccc8c06edd8bf5bda92a51392d0db")))
	pubA, errA := NewPublicKey(c, unhex("aab0eda4abff21208d18799fb9a8556654ba783070eba10cb9abb253ec56dcf5d3ccba6192e464e6e5bcb6dea137792f2431f6c897eb1b3c0cc14327b1adc0a7914613a3074e363aedb204d38d3563971bd8758e878c9db11403721b48002d38461f92472d40ea92f9958c0ffa4c93756401b97f89fdbe0b5e46e4a4631cdb5a"))
	pubB, errB := NewPublicKey(c, unhex("192fe183b9713a077253c72c8735de2ea42a3dbc66ea317838b65fa32523cd5efca974eda7c863f4954d1147f1f2b25c395fce1c129175e876d132e94ed5a65104883b414c9b592ec4dc84826f07d0b6d9006dda176ce48c391e3f97d102e03bb598bf132a228a45f7201aba08fc524a2d77e43a362ab022ad4028f75bde3b79"))
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	// The public keys are the private ones times the base point.
	if x, y := c.scalarMult(c.X, c.Y, dA); x.Cmp(pubA.X) != 0 || y.Cmp(pubA.Y) != 0 {
		t.Fatal("the RFC's x_A does not give its public key")
	}
	want := "c9a9a77320e2cc559ed72dce6f47e2192ccea95fa648670582c054c0ef36c221"
	for name, k := range map[string][2]any{"A": {dA, pubB}, "B": {dB, pubA}} {
		got, err := VKO256(k[0].(*big.Int), k[1].(*PublicKey), ukm)
		if err != nil || hex.EncodeToString(got) != want {
			t.Errorf("side %s: %x, %v; want %s", name, got, err, want)
		}
	}
	if _, err := VKO256(dA, pubB, nil); err == nil {
		t.Error("no UKM was taken")
	}
	if _, err := VKO256(new(big.Int), pubB, ukm); err == nil {
		t.Error("a zero scalar was taken")
	}
}

// An ephemeral key is a point of its curve, and VKO agrees both ways.
func TestEphemeralAgreement(t *testing.T) {
	for _, c := range []*Curve{curves[0], curves[8]} {
		d1, p1, err := GenerateEphemeral(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		d2, p2, _ := GenerateEphemeral(c, nil)
		if _, err := NewPublicKey(c, p1.Bytes()); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		u := unhex("0102030405060708")
		k1, _ := VKO256(d1, p2, u)
		k2, _ := VKO256(d2, p1, u)
		if !bytes.Equal(k1, k2) || len(k1) != 32 {
			t.Fatalf("%s: %x != %x", c.Name, k1, k2)
		}
	}
}
