package gost

import (
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"hash"
	"strings"
)

// Object identifiers of GOST R 34.10-2012 and 34.11-2012 (RFC 9215).
var (
	OIDPublicKey256     = asn1.ObjectIdentifier{1, 2, 643, 7, 1, 1, 1, 1}
	OIDPublicKey512     = asn1.ObjectIdentifier{1, 2, 643, 7, 1, 1, 1, 2}
	OIDDigest256        = asn1.ObjectIdentifier{1, 2, 643, 7, 1, 1, 2, 2}
	OIDDigest512        = asn1.ObjectIdentifier{1, 2, 643, 7, 1, 1, 2, 3}
	OIDSignatureWith256 = asn1.ObjectIdentifier{1, 2, 643, 7, 1, 1, 3, 2}
	OIDSignatureWith512 = asn1.ObjectIdentifier{1, 2, 643, 7, 1, 1, 3, 3}
)

// ErrNotGOST is returned for a key that is not a GOST R 34.10-2012 key.
var ErrNotGOST = errors.New("not a GOST R 34.10-2012 key")

// DigestOID, SignatureOID and KeyOID name the hash, the signature and the
// key algorithm that go with a key of bits (256 or 512).
func DigestOID(bits int) asn1.ObjectIdentifier {
	if bits == 512 {
		return OIDDigest512
	}
	return OIDDigest256
}

// SignatureOID is the signature-with-digest identifier for bits.
func SignatureOID(bits int) asn1.ObjectIdentifier {
	if bits == 512 {
		return OIDSignatureWith512
	}
	return OIDSignatureWith256
}

// NewHash returns the Streebog that goes with a key of bits.
func NewHash(bits int) hash.Hash {
	if bits == 512 {
		return New512()
	}
	return New256()
}

// DigestBits maps a Streebog digest OID to its size, 0 when it is none.
func DigestBits(oid asn1.ObjectIdentifier) int {
	switch {
	case oid.Equal(OIDDigest256):
		return 256
	case oid.Equal(OIDDigest512):
		return 512
	}
	return 0
}

type spki struct {
	Algorithm struct {
		Algorithm  asn1.ObjectIdentifier
		Parameters asn1.RawValue `asn1:"optional"`
	}
	PublicKey asn1.BitString
}

func spkiAlgorithm(der []byte) (spki, int, error) {
	var k spki
	if rest, err := asn1.Unmarshal(der, &k); err != nil || len(rest) != 0 {
		return k, 0, fmt.Errorf("%w: the public key info does not parse", ErrNotGOST)
	}
	switch {
	case k.Algorithm.Algorithm.Equal(OIDPublicKey256):
		return k, 256, nil
	case k.Algorithm.Algorithm.Equal(OIDPublicKey512):
		return k, 512, nil
	}
	return k, 0, fmt.Errorf("%w: the key's algorithm is %s", ErrNotGOST, k.Algorithm.Algorithm)
}

// paramSet reads the parameter-set OID from a key's parameters: a SEQUENCE
// of the set's OID and, optionally, a digest OID (ignored: the digest
// follows the key's size).
func paramSet(params []byte) (asn1.ObjectIdentifier, error) {
	var p struct {
		ParamSet asn1.ObjectIdentifier
		Rest     asn1.RawValue `asn1:"optional"`
		More     asn1.RawValue `asn1:"optional"`
	}
	if _, err := asn1.Unmarshal(params, &p); err != nil {
		return nil, errors.New("the GOST key's parameters do not parse")
	}
	return p.ParamSet, nil
}

// ParsePublicKeyInfo reads a DER SubjectPublicKeyInfo holding a GOST R
// 34.10-2012 key. An unknown parameter set is an error that names it.
func ParsePublicKeyInfo(der []byte) (*PublicKey, error) {
	k, bits, err := spkiAlgorithm(der)
	if err != nil {
		return nil, err
	}
	set, err := paramSet(k.Algorithm.Parameters.FullBytes)
	if err != nil {
		return nil, err
	}
	var value []byte
	if rest, err := asn1.Unmarshal(k.PublicKey.RightAlign(), &value); err != nil || len(rest) != 0 {
		return nil, errors.New("the GOST public key is not an OCTET STRING")
	}
	return PublicKeyOn(set, bits, value)
}

// PublicKeyOn reads the value (x then y, little-endian) of a bits-bit key
// on the parameter set set, as certificates and PKCS#11 tokens give them:
// a set unknown here, or one for keys of the other size, is an error that
// names it.
func PublicKeyOn(set asn1.ObjectIdentifier, bits int, value []byte) (*PublicKey, error) {
	c := CurveByOID(set)
	if c == nil {
		return nil, fmt.Errorf("GOST parameter set %s is unknown to signagent (known: %s)", set, knownSets())
	}
	if c.Bits != bits {
		return nil, fmt.Errorf("GOST parameter set %s is for %d-bit keys, the key is %d-bit", c.Name, c.Bits, bits)
	}
	return NewPublicKey(c, value)
}

// PublicKeyOf returns a certificate's GOST key.
func PublicKeyOf(c *x509.Certificate) (*PublicKey, error) {
	return ParsePublicKeyInfo(c.RawSubjectPublicKeyInfo)
}

func knownSets() string {
	names := make([]string, len(curves))
	for i, c := range curves {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// CheckCertificateSignature checks that parent's GOST key signed c.
func CheckCertificateSignature(c, parent *x509.Certificate) error {
	pub, err := PublicKeyOf(parent)
	if err != nil {
		return err
	}
	var cert struct {
		TBS       asn1.RawValue
		Algorithm struct {
			Algorithm  asn1.ObjectIdentifier
			Parameters asn1.RawValue `asn1:"optional"`
		}
		Signature asn1.BitString
	}
	if _, err := asn1.Unmarshal(c.Raw, &cert); err != nil {
		return err
	}
	if !cert.Algorithm.Algorithm.Equal(SignatureOID(pub.Curve.Bits)) {
		return fmt.Errorf("certificate %q is signed with %s, not GOST R 34.10-2012 with a %d-bit key", c.Subject, cert.Algorithm.Algorithm, pub.Curve.Bits)
	}
	h := NewHash(pub.Curve.Bits)
	h.Write(cert.TBS.FullBytes)
	return Verify(pub, h.Sum(nil), cert.Signature.RightAlign())
}
