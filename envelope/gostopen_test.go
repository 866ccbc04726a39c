package envelope_test

import (
	"bytes"
	"crypto"
	"encoding/asn1"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostmech"
)

// gostOpenerStub stands in for a GOST token in the fuzzer (too many inputs
// for the test module): it checks that what reaches the token has the
// shape the parser promises, and "opens" to the ciphertext.
type gostOpenerStub struct {
	t   *testing.T
	pub crypto.PublicKey
}

func (s gostOpenerStub) Public() crypto.PublicKey { return s.pub }
func (s gostOpenerStub) Decrypt(io.Reader, []byte, crypto.DecrypterOpts) ([]byte, error) {
	s.t.Fatal("an RSA decryption for a GOST certificate")
	return nil, nil
}
func (s gostOpenerStub) CanOpenGOST() error { return nil }
func (s gostOpenerStub) OpenGOST(tr *gost.Transport) ([]byte, error) {
	n := len(tr.Ciphertext)
	if len(tr.UKM) != 8 || len(tr.WrappedKey) != 36 || len(tr.IV) != 8 || len(tr.Ephemeral) != 2*tr.Bits/8 ||
		n != envelope.ChallengeSize ||
		gost.Gost28147ParamSetName(oid(s.t, tr.WrapParamSet)) == "" || gost.Gost28147ParamSetName(oid(s.t, tr.ContentParamSet)) == "" {
		s.t.Fatalf("the token was handed a transport out of shape: %+v", tr)
	}
	return append([]byte{}, tr.Ciphertext...), nil
}

func oid(t *testing.T, der []byte) asn1.ObjectIdentifier {
	var o asn1.ObjectIdentifier
	if rest, err := asn1.Unmarshal(der, &o); err != nil || len(rest) != 0 {
		t.Fatalf("not an OID: %x", der)
	}
	return o
}

// FuzzOpenGOST: any bytes given as a GOST certificate's challenge are
// either refused with an error of the challenge class (or not supported),
// or reach the token in the shape the parser promises; never a panic. The
// seeds are OpenSSL's envelopes (the committed fixtures) and the
// emulator's.
func FuzzOpenGOST(f *testing.F) {
	dir := filepath.Join("..", "signer", "signertest", "testdata", "gostcms")
	cert, err := pkcs11.ReadCertificate(filepath.Join(dir, "cert256.pem"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range []string{"env256-z.der", "env256-a.der", "env512-z.der"} {
		der, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(der)
	}
	sealed, err := envelope.Seal(bytes.Repeat([]byte{1}, 32), cert, false)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed)
	f.Fuzz(func(t *testing.T, der []byte) {
		got, err := envelope.Open(der, cert, gostOpenerStub{t, gostmech.CertificatePublicKey(cert)})
		switch {
		case err == nil && len(got) != envelope.ChallengeSize:
			t.Fatalf("%d bytes opened", len(got))
		case err != nil && !errors.Is(err, envelope.ErrNotChallenge) && !errors.Is(err, envelope.ErrUnsupported):
			t.Fatalf("err = %v", err)
		}
	})
}
