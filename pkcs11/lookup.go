package pkcs11

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"math/big"
	"slices"
	"strings"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostmech"
)

// keyInfo is what is public about a private key object.
type keyInfo struct {
	h             p11.ObjectHandle
	label         string
	id            []byte
	keyType       uint
	pub           crypto.PublicKey // nil when it cannot be read
	why           error            // why pub could not be read, when known
	sign, decrypt bool
}

// FindObjects returns every object matching tmpl.
func FindObjects(b Backend, sh p11.SessionHandle, tmpl []*p11.Attribute) ([]p11.ObjectHandle, error) {
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
func Attributes(b Backend, sh p11.SessionHandle, h p11.ObjectHandle, types ...uint) map[uint][]byte {
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

// findKeys returns the private keys with label and id, and their public halves.
func findKeys(b Backend, sh p11.SessionHandle, label string, id []byte) ([]keyInfo, error) {
	hs, err := FindObjects(b, sh, Template(p11.CKO_PRIVATE_KEY, label, id))
	if err != nil {
		return nil, err
	}
	out := make([]keyInfo, 0, len(hs))
	for _, h := range hs {
		a := Attributes(b, sh, h, p11.CKA_LABEL, p11.CKA_ID, p11.CKA_KEY_TYPE, p11.CKA_SIGN, p11.CKA_DECRYPT, p11.CKA_MODULUS, p11.CKA_PUBLIC_EXPONENT)
		ki := keyInfo{h: h, label: string(a[p11.CKA_LABEL]), id: a[p11.CKA_ID], keyType: ULong(a[p11.CKA_KEY_TYPE]),
			sign: isTrue(a[p11.CKA_SIGN]), decrypt: isTrue(a[p11.CKA_DECRYPT])}
		ki.pub = publicKey(ki.keyType, a)
		if ki.pub == nil {
			ki.pub, ki.why = pairedPublic(b, sh, ki)
		}
		out = append(out, ki)
	}
	return out, nil
}

// publicKey builds a public key from an object's attributes: the modulus
// and exponent of an RSA key, the curve and point of an EC key.
func publicKey(keyType uint, a map[uint][]byte) crypto.PublicKey {
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

// pairedPublic reads the public half from the public key object with the
// private key's id: an EC private key carries no point, and some modules
// (tpm2-pkcs11) give no modulus on an RSA private key either.
func pairedPublic(b Backend, sh p11.SessionHandle, ki keyInfo) (crypto.PublicKey, error) {
	if len(ki.id) == 0 {
		return nil, nil
	}
	hs, err := FindObjects(b, sh, Template(p11.CKO_PUBLIC_KEY, "", ki.id))
	if err != nil {
		return nil, nil
	}
	var why error
	for _, h := range hs {
		var a map[uint][]byte
		if gostmech.IsKeyType(ki.keyType) {
			a = Attributes(b, sh, h, p11.CKA_KEY_TYPE, gostmech.CKA_GOSTR3410_PARAMS, p11.CKA_VALUE)
		} else {
			a = Attributes(b, sh, h, p11.CKA_KEY_TYPE, p11.CKA_MODULUS, p11.CKA_PUBLIC_EXPONENT, p11.CKA_EC_PARAMS, p11.CKA_EC_POINT)
		}
		if ULong(a[p11.CKA_KEY_TYPE]) != ki.keyType {
			continue
		}
		if gostmech.IsKeyType(ki.keyType) {
			pub, err := gostmech.Public(ki.keyType, a)
			if err == nil {
				return pub, nil
			}
			why = err
			continue
		}
		if pub := publicKey(ki.keyType, a); pub != nil {
			return pub, nil
		}
	}
	return nil, why
}

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

func isTrue(b []byte) bool { return len(b) == 1 && b[0] != 0 }

// findCerts returns the certificates stored with the key's id, or, when
// none of those is the key's, with its label. (Each search costs: SoftHSM
// reads its object files again for every one.)
func findCerts(b Backend, sh p11.SessionHandle, id []byte, label string, pub crypto.PublicKey) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for _, tmpl := range [][]*p11.Attribute{Template(p11.CKO_CERTIFICATE, "", id), Template(p11.CKO_CERTIFICATE, label, nil)} {
		if len(tmpl) == 1 {
			continue // neither id nor label: would match every certificate
		}
		hs, err := FindObjects(b, sh, tmpl)
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			c, err := x509.ParseCertificate(Attributes(b, sh, h, p11.CKA_VALUE)[p11.CKA_VALUE])
			if err == nil && !slices.ContainsFunc(out, func(o *x509.Certificate) bool { return bytes.Equal(o.Raw, c.Raw) }) {
				out = append(out, c)
			}
		}
		if slices.ContainsFunc(out, func(c *x509.Certificate) bool { return samePublicKey(gostmech.CertificatePublicKey(c), pub) }) {
			return out, nil
		}
	}
	return out, nil
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

func listKeys(keys []keyInfo) string {
	if len(keys) == 0 {
		return "no private keys"
	}
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		names = append(names, fmt.Sprintf("%q (id %s)", k.label, hex.EncodeToString(k.id)))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// PublicHalf reads a public-key object's label, id and public half (RSA,
// EC or GOST; nil when it cannot be read), without a login.
func PublicHalf(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) (label string, id []byte, pub crypto.PublicKey) {
	a := Attributes(b, sh, h, p11.CKA_LABEL, p11.CKA_ID, p11.CKA_KEY_TYPE, p11.CKA_MODULUS, p11.CKA_PUBLIC_EXPONENT, p11.CKA_EC_PARAMS, p11.CKA_EC_POINT)
	keyType := ULong(a[p11.CKA_KEY_TYPE])
	pub = publicKey(keyType, a)
	if gostmech.IsKeyType(keyType) {
		g := Attributes(b, sh, h, gostmech.CKA_GOSTR3410_PARAMS, p11.CKA_VALUE)
		if gp, err := gostmech.Public(keyType, g); err == nil {
			pub = gp
		}
	}
	return string(a[p11.CKA_LABEL]), a[p11.CKA_ID], pub
}
