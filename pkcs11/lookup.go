package pkcs11

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostmech"
	"github.com/signagent/signagent/pkcs11/object"
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

// findKeys returns the private keys with label and id, and their public halves.
func findKeys(b Backend, sh p11.SessionHandle, label string, id []byte) ([]keyInfo, error) {
	hs, err := object.FindObjects(b, sh, object.Template(p11.CKO_PRIVATE_KEY, label, id))
	if err != nil {
		return nil, err
	}
	out := make([]keyInfo, 0, len(hs))
	for _, h := range hs {
		a := object.Attributes(b, sh, h, p11.CKA_LABEL, p11.CKA_ID, p11.CKA_KEY_TYPE, p11.CKA_SIGN, p11.CKA_DECRYPT, p11.CKA_MODULUS, p11.CKA_PUBLIC_EXPONENT)
		ki := keyInfo{h: h, label: string(a[p11.CKA_LABEL]), id: a[p11.CKA_ID], keyType: object.ULong(a[p11.CKA_KEY_TYPE]),
			sign: object.IsTrue(a[p11.CKA_SIGN]), decrypt: object.IsTrue(a[p11.CKA_DECRYPT])}
		ki.pub = object.PublicKey(ki.keyType, a)
		if ki.pub == nil {
			ki.pub, ki.why = pairedPublic(b, sh, ki)
		}
		out = append(out, ki)
	}
	return out, nil
}

// pairedPublic reads the public half from the public key object with the
// private key's id: an EC private key carries no point, and some modules
// (tpm2-pkcs11) give no modulus on an RSA private key either.
func pairedPublic(b Backend, sh p11.SessionHandle, ki keyInfo) (crypto.PublicKey, error) {
	if len(ki.id) == 0 {
		return nil, nil
	}
	hs, err := object.FindObjects(b, sh, object.Template(p11.CKO_PUBLIC_KEY, "", ki.id))
	if err != nil {
		return nil, nil
	}
	var why error
	for _, h := range hs {
		var a map[uint][]byte
		if gostmech.IsKeyType(ki.keyType) {
			a = object.Attributes(b, sh, h, p11.CKA_KEY_TYPE, gostmech.CKA_GOSTR3410_PARAMS, p11.CKA_VALUE)
		} else {
			a = object.Attributes(b, sh, h, p11.CKA_KEY_TYPE, p11.CKA_MODULUS, p11.CKA_PUBLIC_EXPONENT, p11.CKA_EC_PARAMS, p11.CKA_EC_POINT)
		}
		if object.ULong(a[p11.CKA_KEY_TYPE]) != ki.keyType {
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
		if pub := object.PublicKey(ki.keyType, a); pub != nil {
			return pub, nil
		}
	}
	return nil, why
}

// findCerts returns the certificates stored with the key's id, or, when
// none of those is the key's, with its label. (Each search costs: SoftHSM
// reads its object files again for every one.)
func findCerts(b Backend, sh p11.SessionHandle, id []byte, label string, pub crypto.PublicKey) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for _, tmpl := range [][]*p11.Attribute{object.Template(p11.CKO_CERTIFICATE, "", id), object.Template(p11.CKO_CERTIFICATE, label, nil)} {
		if len(tmpl) == 1 {
			continue // neither id nor label: would match every certificate
		}
		hs, err := object.FindObjects(b, sh, tmpl)
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			c, err := x509.ParseCertificate(object.Attributes(b, sh, h, p11.CKA_VALUE)[p11.CKA_VALUE])
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
