// Package gostmech is what GOST R 34.10-2012 keys are to PKCS#11: their key
// types and mechanisms (PKCS#11 2.30's and the TC26 extension's), how a key
// signs on a token given the mechanisms it offers (Ways, Choose), and a
// public key from a key object's attributes or a certificate. It needs
// nothing of package pkcs11, which imports it and does the signing.
package gostmech

import (
	"crypto"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"slices"
	"strings"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// GOST R 34.10-2012 key types and mechanisms: CKK_GOSTR3410 and
// CKM_GOSTR3410 are PKCS#11 2.30's, the rest the TC26 extension's (vendor
// base 0xD4321000; p11-kit's pkcs11x.h spells them ..._2012_...).
const (
	CKK_GOSTR3410                       = p11.CKK_GOSTR3410 // 256-bit keys
	CKK_GOSTR3410_512                   = 0xD4321003
	CKA_GOSTR3410_PARAMS                = p11.CKA_GOSTR3410_PARAMS
	CKM_GOSTR3410                       = p11.CKM_GOSTR3410 // sign a 32-byte hash
	CKM_GOSTR3410_512                   = 0xD4321006        // sign a 64-byte hash
	CKM_GOSTR3410_WITH_GOSTR3411_12_256 = 0xD4321008        // the token hashes, then signs
	CKM_GOSTR3410_WITH_GOSTR3411_12_512 = 0xD4321009
	CKM_GOSTR3411_12_256                = 0xD4321012 // Streebog through C_Digest
	CKM_GOSTR3411_12_512                = 0xD4321013
)

// IsKeyType says whether t is a GOST R 34.10-2012 key type.
func IsKeyType(t uint) bool { return t == CKK_GOSTR3410 || t == CKK_GOSTR3410_512 }

// Bits is a GOST key type's size.
func Bits(keyType uint) int {
	if keyType == CKK_GOSTR3410_512 {
		return 512
	}
	return 256
}

// Ways is how a GOST key signs on its token, chosen once from the
// mechanism list: with the hashing mechanism where the token has it,
// otherwise Streebog on the token (C_Digest) and the raw mechanism over it,
// otherwise Streebog here and the raw mechanism (pkcs11/gostraw.go).
type Ways struct {
	Bits   int
	Hashed uint // CKM_GOSTR3410_WITH_GOSTR3411_12_*, or 0
	Raw    uint // CKM_GOSTR3410(_512), or 0
	Digest uint // CKM_GOSTR3411_12_*, or 0
}

// Mechanisms are the hashing, raw and digest mechanisms of a key size.
func Mechanisms(bits int) (hashed, raw, digest uint) {
	if bits == 512 {
		return CKM_GOSTR3410_WITH_GOSTR3411_12_512, CKM_GOSTR3410_512, CKM_GOSTR3411_12_512
	}
	return CKM_GOSTR3410_WITH_GOSTR3411_12_256, CKM_GOSTR3410, CKM_GOSTR3411_12_256
}

// Name names the GOST mechanisms as OpenSC's pkcs11-tool does.
func Name(m uint) string {
	switch m {
	case CKM_GOSTR3410:
		return "GOSTR3410"
	case CKM_GOSTR3410_512:
		return "GOSTR3410_512"
	case CKM_GOSTR3410_WITH_GOSTR3411_12_256:
		return "GOSTR3410-WITH-GOSTR3411-12-256"
	case CKM_GOSTR3410_WITH_GOSTR3411_12_512:
		return "GOSTR3410-WITH-GOSTR3411-12-512"
	case CKM_GOSTR3411_12_256:
		return "GOSTR3411-12-256"
	case CKM_GOSTR3411_12_512:
		return "GOSTR3411-12-512"
	}
	return fmt.Sprintf("0x%08X", m)
}

// Choose picks the signing path from the token's mechanisms, or
// says which mechanisms are missing.
func Choose(bits int, offered []uint, token, key string) (Ways, error) {
	has := func(m uint) bool { return slices.Contains(offered, m) }
	hashed, raw, digest := Mechanisms(bits)
	w := Ways{Bits: bits}
	if has(hashed) {
		w.Hashed = hashed
	}
	if has(raw) {
		w.Raw = raw
	}
	if has(digest) {
		w.Digest = digest
	}
	if w.Hashed == 0 && w.Raw == 0 {
		return w, fmt.Errorf("%w: token %q cannot sign with the GOST %d-bit key %q: it offers no GOST signature mechanism (neither %s nor %s)", tokenerr.ErrKeyUsage, token, bits, key, Name(hashed), Name(raw))
	}
	return w, nil
}

// Public builds a GOST public key from a public key object's
// parameter set and value.
func Public(keyType uint, a map[uint][]byte) (*gost.PublicKey, error) {
	var oid asn1.ObjectIdentifier
	if _, err := asn1.Unmarshal(a[CKA_GOSTR3410_PARAMS], &oid); err != nil {
		return nil, errors.New("its CKA_GOSTR3410_PARAMS is not an object identifier")
	}
	bits := Bits(keyType)
	value := a[p11.CKA_VALUE]
	// Some modules wrap the value in a DER OCTET STRING.
	var inner []byte
	if len(value) != 2*bits/8 {
		if rest, err := asn1.Unmarshal(value, &inner); err == nil && len(rest) == 0 {
			value = inner
		}
	}
	return gost.PublicKeyOn(oid, bits, value)
}

// CertificatePublicKey returns a certificate's public key, GOST keys
// included (crypto/x509 leaves those nil).
func CertificatePublicKey(c *x509.Certificate) crypto.PublicKey {
	if c.PublicKey != nil {
		return c.PublicKey
	}
	if pub, err := gost.PublicKeyOf(c); err == nil {
		return pub
	}
	return nil
}

// InSignagent says that the way chosen hashes here: the token offers
// neither the hashing mechanism nor its Streebog, only the raw one.
func (w Ways) InSignagent() bool { return w.Hashed == 0 && w.Digest == 0 && w.Raw != 0 }

// CKMName is a GOST mechanism's CKM_ name (Name is pkcs11-tool's).
func CKMName(m uint) string { return "CKM_" + strings.ReplaceAll(Name(m), "-", "_") }

// Describe names the way, as the log and token check show it.
func (w Ways) Describe() string {
	switch {
	case w.Hashed != 0:
		return fmt.Sprintf("%s: the token hashes (Streebog-%d) and signs", CKMName(w.Hashed), w.Bits)
	case w.InSignagent():
		return fmt.Sprintf("Streebog-%d in signagent, then raw %s on the token", w.Bits, CKMName(w.Raw))
	}
	return fmt.Sprintf("%s on the token (C_Digest), then %s over the hash", CKMName(w.Digest), CKMName(w.Raw))
}
