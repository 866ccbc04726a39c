package gost

import "encoding/asn1"

// Transport is a GOST R 34.10-2012 key transport (RFC 4490 section 5.2,
// CryptoPro's) and the content it protects, read from a certificate
// login's challenge and checked for shape: what a token needs to open it
// without the private key leaving it. The envelope package fills it; the
// pkcs11 package hands it to the token.
type Transport struct {
	// Bits is the recipient's key size: 256 or 512.
	Bits int
	// KeyTransport is the DER GostR3410-KeyTransport, whole, for a token
	// that unwraps in one step (CKM_GOSTR3410_KEY_WRAP).
	KeyTransport []byte
	// Ephemeral is the sender's ephemeral public key on the recipient's
	// curve: x then y, each little-endian (64 or 128 bytes).
	Ephemeral []byte
	// UKM is the 8-byte user keying material: VKO's input, the
	// diversification's and the MAC's IV.
	UKM []byte
	// WrappedKey is the content key encrypted under the diversified KEK
	// (32 bytes) followed by its 4-byte IMIT: CKM_GOST28147_KEY_WRAP's input.
	WrappedKey []byte
	// WrapParamSet is the DER OBJECT IDENTIFIER of the key wrap's S-box.
	WrapParamSet []byte
	// IV is the content cipher's 8-byte IV.
	IV []byte
	// ContentParamSet is the DER OBJECT IDENTIFIER of the content cipher's
	// S-box.
	ContentParamSet []byte
	// Ciphertext is the content, GOST 28147-89 in CFB mode with CryptoPro
	// key meshing: as long as the plaintext.
	Ciphertext []byte
}

// GOST 28147-89 parameter sets (S-boxes): CryptoPro-A..D (RFC 4357
// section 11.2) and TC26's Z (the S-box of Magma, RFC 8891).
var (
	OIDGost28147CryptoProA = asn1.ObjectIdentifier{1, 2, 643, 2, 2, 31, 1}
	OIDGost28147CryptoProB = asn1.ObjectIdentifier{1, 2, 643, 2, 2, 31, 2}
	OIDGost28147CryptoProC = asn1.ObjectIdentifier{1, 2, 643, 2, 2, 31, 3}
	OIDGost28147CryptoProD = asn1.ObjectIdentifier{1, 2, 643, 2, 2, 31, 4}
	OIDGost28147TC26Z      = asn1.ObjectIdentifier{1, 2, 643, 7, 1, 2, 5, 1, 1}
	// OIDGost28147 is id-Gost28147-89, the content-encryption algorithm.
	OIDGost28147 = asn1.ObjectIdentifier{1, 2, 643, 2, 2, 21}
)

// Gost28147ParamSets are the S-boxes a challenge may name, with their names.
var Gost28147ParamSets = []struct {
	Name string
	OID  asn1.ObjectIdentifier
}{
	{"CryptoPro-A", OIDGost28147CryptoProA},
	{"CryptoPro-B", OIDGost28147CryptoProB},
	{"CryptoPro-C", OIDGost28147CryptoProC},
	{"CryptoPro-D", OIDGost28147CryptoProD},
	{"TC26-Z", OIDGost28147TC26Z},
}

// Gost28147ParamSetName names a known S-box, or returns "".
func Gost28147ParamSetName(oid asn1.ObjectIdentifier) string {
	for _, s := range Gost28147ParamSets {
		if s.OID.Equal(oid) {
			return s.Name
		}
	}
	return ""
}
