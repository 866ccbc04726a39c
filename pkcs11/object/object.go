// Package object reads PKCS#11 objects: finding them by a template
// (Template, FindObjects), reading their attributes (Attributes, ULong,
// IsTrue), and building a public key from them (PublicKey, PublicHalf);
// DescribeKey names a key looked for. It needs nothing of package pkcs11,
// which imports it.
package object

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostmech"
)

// Reader is the part of a module's interface (pkcs11.Backend) that finds
// objects and reads their attributes.
type Reader interface {
	FindObjectsInit(sh p11.SessionHandle, tmpl []*p11.Attribute) error
	FindObjects(sh p11.SessionHandle, max int) ([]p11.ObjectHandle, bool, error)
	FindObjectsFinal(sh p11.SessionHandle) error
	GetAttributeValue(sh p11.SessionHandle, o p11.ObjectHandle, a []*p11.Attribute) ([]*p11.Attribute, error)
}

// FindObjects returns every object matching tmpl.
func FindObjects(b Reader, sh p11.SessionHandle, tmpl []*p11.Attribute) ([]p11.ObjectHandle, error) {
	if err := b.FindObjectsInit(sh, tmpl); err != nil {
		return nil, err
	}
	defer b.FindObjectsFinal(sh)
	var all []p11.ObjectHandle
	for {
		hs, _, err := b.FindObjects(sh, 64)
		if err != nil {
			return nil, err
		}
		if len(hs) == 0 {
			return all, nil
		}
		all = append(all, hs...)
	}
}

// Attributes reads the attributes types of object h; one the token will not
// give (sensitive, absent) is left out of the map.
func Attributes(b Reader, sh p11.SessionHandle, h p11.ObjectHandle, types ...uint) map[uint][]byte {
	out := map[uint][]byte{}
	tmpl := make([]*p11.Attribute, len(types))
	for i, t := range types {
		tmpl[i] = p11.NewAttribute(t, nil)
	}
	// All at once when the module gives them all (each call costs: SoftHSM
	// checks the object's file every time)...
	if a, err := b.GetAttributeValue(sh, h, tmpl); err == nil && len(a) == len(types) {
		for _, x := range a {
			if x.Value != nil {
				out[x.Type] = x.Value
			}
		}
		return out
	}
	// ...else one at a time: a module answers a template with one
	// unreadable (absent, sensitive) attribute with an error for the whole.
	for _, t := range types {
		a, err := b.GetAttributeValue(sh, h, []*p11.Attribute{p11.NewAttribute(t, nil)})
		if err == nil && len(a) == 1 && a[0].Value != nil {
			out[t] = a[0].Value
		}
	}
	return out
}

// Template matches objects of class with the given label and id (either
// may be empty: not part of the match).
func Template(class uint, label string, id []byte) []*p11.Attribute {
	t := []*p11.Attribute{p11.NewAttribute(p11.CKA_CLASS, class)}
	if label != "" {
		t = append(t, p11.NewAttribute(p11.CKA_LABEL, label))
	}
	if len(id) > 0 {
		t = append(t, p11.NewAttribute(p11.CKA_ID, id))
	}
	return t
}

// PublicKey builds a public key from an object's attributes: the modulus
// and exponent of an RSA key, the curve and point of an EC key.
func PublicKey(keyType uint, a map[uint][]byte) crypto.PublicKey {
	switch keyType {
	case p11.CKK_RSA:
		if n, e := a[p11.CKA_MODULUS], a[p11.CKA_PUBLIC_EXPONENT]; len(n) > 0 && len(e) > 0 {
			return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		}
	case p11.CKK_EC:
		curve, point := curveOf(a[p11.CKA_EC_PARAMS]), a[p11.CKA_EC_POINT]
		if curve == nil || point == nil {
			return nil
		}
		// CKA_EC_POINT is a DER OCTET STRING; some modules give it bare.
		var inner []byte
		if rest, err := asn1.Unmarshal(point, &inner); err == nil && len(rest) == 0 {
			point = inner
		}
		if pub, err := ecdsa.ParseUncompressedPublicKey(curve, point); err == nil {
			return pub
		}
	}
	return nil
}

// curveOf is the curve of an EC key's CKA_EC_PARAMS, nil when not one of CurveNames.
func curveOf(params []byte) elliptic.Curve {
	var oid asn1.ObjectIdentifier
	if _, err := asn1.Unmarshal(params, &oid); err != nil {
		return nil
	}
	switch CurveNames[oid.String()] {
	case "P-256":
		return elliptic.P256()
	case "P-384":
		return elliptic.P384()
	case "P-521":
		return elliptic.P521()
	}
	return nil
}

// IsTrue reads a CK_BBOOL attribute value.
func IsTrue(b []byte) bool { return len(b) == 1 && b[0] != 0 }

// PublicHalf reads a public-key object's label, id and public half (RSA,
// EC or GOST; nil when it cannot be read), without a login.
func PublicHalf(b Reader, sh p11.SessionHandle, h p11.ObjectHandle) (label string, id []byte, pub crypto.PublicKey) {
	a := Attributes(b, sh, h, p11.CKA_LABEL, p11.CKA_ID, p11.CKA_KEY_TYPE, p11.CKA_MODULUS, p11.CKA_PUBLIC_EXPONENT, p11.CKA_EC_PARAMS, p11.CKA_EC_POINT)
	keyType := ULong(a[p11.CKA_KEY_TYPE])
	pub = PublicKey(keyType, a)
	if gostmech.IsKeyType(keyType) {
		g := Attributes(b, sh, h, gostmech.CKA_GOSTR3410_PARAMS, p11.CKA_VALUE)
		if gp, err := gostmech.Public(keyType, g); err == nil {
			pub = gp
		}
	}
	return string(a[p11.CKA_LABEL]), a[p11.CKA_ID], pub
}

// DescribeKey names a key by its label and id, for an error that says
// what was looked for ("labelled \"a\" and with id 01", "at all").
func DescribeKey(label string, id []byte) string {
	var parts []string
	if label != "" {
		parts = append(parts, fmt.Sprintf("labelled %q", label))
	}
	if len(id) > 0 {
		parts = append(parts, "with id "+hex.EncodeToString(id))
	}
	if len(parts) == 0 {
		return "at all"
	}
	return strings.Join(parts, " and ")
}

// ULong reads a CK_ULONG attribute value.
func ULong(b []byte) uint {
	var n uint
	for i := len(b) - 1; i >= 0; i-- { // native little-endian CK_ULONG
		n = n<<8 | uint(b[i])
	}
	return n
}

// CurveNames names the curves of EC keys by their OIDs.
var CurveNames = map[string]string{
	"1.2.840.10045.3.1.7": "P-256",
	"1.3.132.0.34":        "P-384",
	"1.3.132.0.35":        "P-521",
}
