package envelope_test

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/softhsm"
	"github.com/signagent/signagent/signer/signertest"
)

// document is what a hostile service would have the token decrypt: 87
// bytes that are not a challenge (the reproduction's size).
var document = []byte("CONFIDENTIAL: the board meets on Friday; the merger price is 41 per share. Tell nobody.")

// countingKey counts the token's decryptions.
type countingKey struct {
	crypto.Decrypter
	n atomic.Int32
}

func (k *countingKey) Decrypt(r io.Reader, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	k.n.Add(1)
	return k.Decrypter.Decrypt(r, msg, opts)
}

// TestOpenRefusesWhatIsNotAChallenge: the token (SoftHSM) is offered
// envelopes addressed to its certificate that are not the service's
// challenge. Those whose shape says so are refused before the token is
// asked, each with its reason; those that only the key transport or the
// content can give away (bad RSA padding, a key of the wrong length, bad
// content padding, 33 bytes of content) are refused with one and the same
// error after exactly one decryption, and nothing of their plaintext is
// returned.
func TestOpenRefusesWhatIsNotAChallenge(t *testing.T) {
	tk := pkcs11test.New(t)
	key := tk.Open(t, "rsa")
	defer key.Close()
	cert := key.Certificate()
	pub := cert.PublicKey.(*rsa.PublicKey)
	other := otherCert(t)
	random := make([]byte, envelope.ChallengeSize)
	rand.Read(random)

	good := func(m ...func(*spec)) []byte {
		s := challengeSpec(t, cert, random, 32)
		for _, f := range m {
			f(&s)
		}
		return s.der(t)
	}
	if got, err := envelope.Open(good(), cert, key); err != nil || string(got) != string(random) {
		t.Fatalf("the well-formed challenge: %v", err)
	}

	before := []struct {
		name string
		der  []byte
		want error
		says string
	}{
		{"two recipients", openssl(t, random, []*x509.Certificate{cert, other}, "-aes256"), envelope.ErrNotChallenge, "2 recipients"},
		{"two recipients, none ours", openssl(t, random, []*x509.Certificate{other, otherCert(t)}, "-aes256"), envelope.ErrNotForUs, "2 other recipients"},
		{"another certificate", openssl(t, random, []*x509.Certificate{other}, "-aes256"), envelope.ErrNotForUs, "1 other recipient"},
		{"87-byte document", openssl(t, document, []*x509.Certificate{cert}, "-aes256"), envelope.ErrNotChallenge, "the encrypted content is 96 bytes"},
		{"87-byte document, OAEP", openssl(t, document, []*x509.Certificate{cert}, "-aes128", "rsa_padding_mode:oaep"), envelope.ErrNotChallenge, "96 bytes"},
		{"16-byte content", openssl(t, random[:16], []*x509.Certificate{cert}, "-aes256"), envelope.ErrNotChallenge, "32 bytes"},
		{"3DES content", openssl(t, random, []*x509.Certificate{cert}, "-des3"), envelope.ErrNotChallenge, "is not AES-CBC"},
		{"AES-GCM (AuthEnvelopedData)", openssl(t, random, []*x509.Certificate{cert}, "-aes-256-gcm"), envelope.ErrMalformed, "content type"},
		{"OAEP with SHA-512", openssl(t, random, []*x509.Certificate{cert}, "-aes256", "rsa_padding_mode:oaep", "rsa_oaep_md:sha512"), envelope.ErrNotChallenge, "SHA-1 and SHA-256"},
		{"unknown key transport", good(func(s *spec) { s.keyAlg = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 5} }), envelope.ErrNotChallenge, "is not RSA PKCS#1 v1.5 or RSA-OAEP"},
		{"PKCS#1 v1.5 with parameters", good(func(s *spec) { s.keyParams = []byte{0x04, 0x00} }), envelope.ErrNotChallenge, "with parameters"},
		{"unknown content cipher", good(func(s *spec) { s.contentAlg = asn1.ObjectIdentifier{1, 2, 643, 7, 1, 1, 5, 1} }), envelope.ErrNotChallenge, "is not AES-CBC"},
		{"short IV", good(func(s *spec) { s.iv = s.iv[:8] }), envelope.ErrNotChallenge, "16-byte IV"},
		{"content type not data", good(func(s *spec) { s.contentType = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2} }), envelope.ErrNotChallenge, "not data"},
		{"encrypted key not the modulus' length", good(func(s *spec) { s.encKey = s.encKey[1:] }), envelope.ErrNotChallenge, "the encrypted key is 255 bytes"},
		{"encrypted key plus the modulus", good(func(s *spec) {
			// c+N decrypts as c does on a token that takes values past N:
			// another encoding of a key transport seen before.
			c := new(big.Int).Add(new(big.Int).SetBytes(s.encKey), pub.N)
			if c.BitLen() > pub.N.BitLen() || len(c.Bytes()) > pub.Size() {
				c = new(big.Int).Set(pub.N) // c+N does not fit: N itself is past the bound as well
			}
			s.encKey = c.FillBytes(make([]byte, pub.Size()))
		}), envelope.ErrNotChallenge, "not below the certificate's RSA modulus"},
		{"no content", good(func(s *spec) { s.ciphertext = nil }), envelope.ErrNotChallenge, "is 0 bytes"},
		{"a second, key-agreement recipient", good(func(s *spec) { s.kari = true }), envelope.ErrNotChallenge, "not key transport"},
		{"unprotected attributes", good(func(s *spec) { s.attrs = true }), envelope.ErrNotChallenge, "unprotectedAttrs"},
	}
	for _, tc := range before {
		t.Run(tc.name, func(t *testing.T) {
			k := &countingKey{Decrypter: key}
			got, err := envelope.Open(tc.der, cert, k)
			if !errors.Is(err, tc.want) || !errors.Is(err, envelope.ErrNotChallenge) || !strings.Contains(err.Error(), tc.says) || got != nil {
				t.Fatalf("err = %v, want %v saying %q", err, tc.want, tc.says)
			}
			if n := k.n.Load(); n != 0 {
				t.Fatalf("the token was asked %d times", n)
			}
		})
	}

	badPKCS1 := make([]byte, pub.Size())
	rand.Read(badPKCS1[1:]) // below the modulus, and almost surely not PKCS#1 v1.5
	wrongPad := append(append([]byte{}, random...), []byte("not sixteen 0x10")...)
	after := []struct {
		name string
		der  []byte
	}{
		{"bad PKCS#1 v1.5 padding", good(func(s *spec) { s.encKey = badPKCS1 })},
		{"bad OAEP padding", good(func(s *spec) {
			s.keyAlg, s.keyParams, s.encKey = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 7}, []byte{0x30, 0x00}, badPKCS1
		})},
		{"a 16-byte key for AES-256", good(func(s *spec) { s.encKey = rsaEncrypt(t, pub, s.cek[:16]) })},
		{"a 32-byte key for AES-128", good(func(s *spec) {
			s.contentAlg = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 2}
		})},
		{"bad content padding", good(func(s *spec) { s.ciphertext = cbc(t, s.cek, s.iv, wrongPad) })},
		{"33-byte content (48 bytes encrypted)", openssl(t, append(append([]byte{}, random...), '!'), []*x509.Certificate{cert}, "-aes256")},
		{"another random under a wrong key", good(func(s *spec) { s.encKey = rsaEncrypt(t, pub, make([]byte, 32)) })},
	}
	var first string
	for _, tc := range after {
		t.Run(tc.name, func(t *testing.T) {
			k := &countingKey{Decrypter: key}
			got, err := envelope.Open(tc.der, cert, k)
			if err != envelope.ErrChallenge || got != nil {
				t.Fatalf("err = %v (%q), want exactly ErrChallenge", err, got)
			}
			if first == "" {
				first = err.Error()
			}
			if err.Error() != first || !errors.Is(err, envelope.ErrNotChallenge) {
				t.Fatalf("the error %q is not the others' %q", err, first)
			}
			if n := k.n.Load(); n != 1 {
				t.Fatalf("the token was asked %d times, want once", n)
			}
		})
	}
	// The token can still open the real challenge after all that.
	if got, err := envelope.Open(good(), cert, key); err != nil || string(got) != string(random) {
		t.Fatalf("the well-formed challenge, after: %v", err)
	}
}

// spec is an envelope's parts, for building the ones a hostile service
// could send.
type spec struct {
	cert            *x509.Certificate
	keyAlg          asn1.ObjectIdentifier
	keyParams       []byte
	encKey, cek, iv []byte
	contentType     asn1.ObjectIdentifier
	contentAlg      asn1.ObjectIdentifier
	ciphertext      []byte
	kari, attrs     bool
}

// challengeSpec is a well-formed challenge holding random: AES-CBC with a
// keyLen-byte key transported with RSA PKCS#1 v1.5.
func challengeSpec(t *testing.T, cert *x509.Certificate, random []byte, keyLen int) spec {
	cek, iv := make([]byte, keyLen), make([]byte, aes.BlockSize)
	rand.Read(cek)
	rand.Read(iv)
	algs := map[int]asn1.ObjectIdentifier{16: {2, 16, 840, 1, 101, 3, 4, 1, 2}, 32: {2, 16, 840, 1, 101, 3, 4, 1, 42}}
	pad := make([]byte, aes.BlockSize)
	for i := range pad {
		pad[i] = aes.BlockSize
	}
	return spec{cert: cert, keyAlg: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}, keyParams: []byte{0x05, 0x00},
		encKey: rsaEncrypt(t, cert.PublicKey.(*rsa.PublicKey), cek), cek: cek, iv: iv,
		contentType: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}, contentAlg: algs[keyLen],
		ciphertext: cbc(t, cek, iv, append(append([]byte{}, random...), pad...))}
}

func rsaEncrypt(t *testing.T, pub *rsa.PublicKey, msg []byte) []byte {
	b, err := rsa.EncryptPKCS1v15(rand.Reader, pub, msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func cbc(t *testing.T, key, iv, plain []byte) []byte {
	b, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(plain))
	cipher.NewCBCEncrypter(b, iv).CryptBlocks(out, plain)
	return out
}

func (s spec) der(t *testing.T) []byte {
	type ias struct {
		Issuer asn1.RawValue
		Serial *big.Int
	}
	algID := func(oid asn1.ObjectIdentifier, params []byte) asn1.RawValue {
		b, _ := asn1.Marshal(oid)
		return asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: append(b, params...)}
	}
	type ktri struct {
		Version   int
		Recipient ias
		Algorithm asn1.RawValue
		Key       []byte
	}
	var recipients []asn1.RawValue
	k, err := asn1.Marshal(ktri{Recipient: ias{asn1.RawValue{FullBytes: s.cert.RawIssuer}, s.cert.SerialNumber}, Algorithm: algID(s.keyAlg, s.keyParams), Key: s.encKey})
	if err != nil {
		t.Fatal(err)
	}
	recipients = append(recipients, asn1.RawValue{FullBytes: k})
	if s.kari {
		recipients = append(recipients, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 1, IsCompound: true, Bytes: []byte{0x02, 0x01, 0x03}})
	}
	iv, _ := asn1.Marshal(s.iv)
	eci := struct {
		Type      asn1.ObjectIdentifier
		Algorithm asn1.RawValue
		Content   asn1.RawValue
	}{s.contentType, algID(s.contentAlg, iv), asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, Bytes: s.ciphertext}}
	var ecib []byte
	if s.ciphertext == nil {
		ecib, err = asn1.Marshal(struct {
			Type      asn1.ObjectIdentifier
			Algorithm asn1.RawValue
		}{eci.Type, eci.Algorithm})
	} else {
		ecib, err = asn1.Marshal(eci)
	}
	if err != nil {
		t.Fatal(err)
	}
	set, err := asn1.Marshal(struct {
		R []asn1.RawValue `asn1:"set"`
	}{recipients})
	if err != nil {
		t.Fatal(err)
	}
	// The SET is the only field of that SEQUENCE: take its bytes.
	var setRaw asn1.RawValue
	asn1.Unmarshal(set, &setRaw)
	ver, _ := asn1.Marshal(0)
	body := append(append(ver, setRaw.Bytes...), ecib...)
	if s.attrs {
		body = append(body, 0xa1, 0x00)
	}
	ed, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: body})
	der, err := asn1.Marshal(struct {
		Type    asn1.ObjectIdentifier
		Content asn1.RawValue
	}{asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 3}, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: ed}})
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// openssl encrypts content with `openssl cms -encrypt` and cipher (such as
// -aes256) to the certificates, each with the -keyopt values given, as a
// service could.
func openssl(t *testing.T, content []byte, to []*x509.Certificate, cipher string, keyopts ...string) []byte {
	ossl := signertest.NeedTool(t, "openssl")
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "env.der")
	os.WriteFile(in, content, 0o600)
	args := []string{"cms", "-encrypt", "-binary", cipher, "-in", in, "-outform", "DER", "-out", out}
	for i, c := range to {
		f := filepath.Join(dir, fmt.Sprintf("cert%d.pem", i))
		os.WriteFile(f, signertest.PEM(c), 0o600)
		args = append(args, "-recip", f)
		for _, o := range keyopts { // -keyopt applies to the -recip before it
			args = append(args, "-keyopt", o)
		}
	}
	if b, err := exec.Command(ossl, args...).CombinedOutput(); err != nil {
		t.Fatalf("openssl %v: %v\n%s", args, err, b)
	}
	der, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// FuzzOpen: any bytes are a random of ChallengeSize bytes or an error of
// the class ErrNotChallenge (or ErrUnsupported), never a panic or anything
// else. The key is in memory: the fuzzer runs too many inputs for a token,
// and what is under test is the parsing around the key transport.
func FuzzOpen(f *testing.F) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	cert, err := softhsm.SelfSigned(key, "fuzz", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		f.Fatal(err)
	}
	for _, content := range [][]byte{make([]byte, envelope.ChallengeSize), []byte("random")} {
		for _, oaep := range []bool{false, true} {
			der, err := envelope.Seal(content, cert, oaep)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(der)
		}
	}
	f.Fuzz(func(t *testing.T, der []byte) {
		got, err := envelope.Open(der, cert, key)
		switch {
		case err == nil && len(got) != envelope.ChallengeSize:
			t.Fatalf("%d bytes opened", len(got))
		case err != nil && !errors.Is(err, envelope.ErrNotChallenge) && !errors.Is(err, envelope.ErrUnsupported):
			t.Fatalf("err = %v", err)
		}
	})
}
