package envelope

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"

	"github.com/signagent/signagent/internal/gost"
	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// GOSTWrapSBox is the key wrap's S-box: OpenSSL's gost engine takes TC26-Z
// for every GOST R 34.10-2012 recipient (CryptoPro-A only for 2001 keys).
var GOSTWrapSBox = gost.SBoxTC26Z

// SealGOST encrypts content to a GOST R 34.10-2012 certificate (256 or
// 512-bit key) as the service does: CMS EnvelopedData with CryptoPro key
// transport (RFC 4490). An ephemeral key on the certificate's curve and a
// random 8-byte UKM give the KEK (VKO_GOSTR3410_2012_256, RFC 7836); a
// random content key is wrapped under it with the CryptoPro key wrap (RFC
// 4357 6.3, S-box GOSTWrapSBox); the content is GOST 28147-89 CFB with
// CryptoPro key meshing under contentSBox (CryptoPro-A or TC26-Z in
// practice). The DER is what `openssl cms -encrypt -gost89` writes
// (gost-certlogin.md 1.2, 2.3). The ephemeral key's arithmetic is not
// constant time: this is the emulator's, for throwaway keys.
func SealGOST(content []byte, cert *x509.Certificate, contentSBox *gost.SBox) ([]byte, error) {
	if contentSBox == nil {
		return nil, errors.New("sealing to a GOST certificate needs the content's S-box")
	}
	pub, err := gost.PublicKeyOf(cert)
	if err != nil {
		return nil, fmt.Errorf("cannot seal to certificate %q: %w", cert.Subject, err)
	}
	var keyAlg struct {
		Algorithm asn1.RawValue
		Rest      asn1.RawValue
	}
	if _, err := asn1.Unmarshal(cert.RawSubjectPublicKeyInfo, &keyAlg); err != nil {
		return nil, fmt.Errorf("cannot seal to certificate %q: its public key info does not parse", cert.Subject)
	}
	d, eph, err := gost.GenerateEphemeral(pub.Curve, rand.Reader)
	if err != nil {
		return nil, err
	}
	ukm, cek, iv := make([]byte, gost.UKMSize), make([]byte, gost.KeySize), make([]byte, gost.BlockSize)
	for _, b := range [][]byte{ukm, cek, iv} {
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
	}
	kek, err := gost.VKO256(d, pub, ukm)
	if err != nil {
		return nil, err
	}
	wrapped, mac, err := gost.WrapCryptoPro(kek, ukm, cek, GOSTWrapSBox)
	if err != nil {
		return nil, err
	}
	e, err := gost.NewCFBEncrypter(cek, iv, contentSBox, true)
	if err != nil {
		return nil, err
	}
	ct := make([]byte, len(content))
	e.XORKeyStream(ct, content)

	// GostR3410-KeyTransport (RFC 4490 section 4.2.1).
	alg := keyAlg.Algorithm.FullBytes // the certificate's: OID and key parameters
	var kt cryptobyte.Builder
	kt.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // Gost28147-89-EncryptedKey
			b.AddASN1OctetString(wrapped)
			b.AddASN1OctetString(mac)
		})
		b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) { // [0] IMPLICIT GostR3410-TransportParameters
			b.AddASN1ObjectIdentifier(GOSTWrapSBox.OID)
			b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) { // [0] IMPLICIT SubjectPublicKeyInfo
				b.AddBytes(alg)
				b.AddASN1BitString(octetString(eph.Bytes()))
			})
			b.AddASN1OctetString(ukm)
		})
	})
	ktDER, err := kt.Bytes()
	if err != nil {
		return nil, err
	}

	var out cryptobyte.Builder
	out.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // ContentInfo
		b.AddASN1ObjectIdentifier(oidEnvelopedData)
		b.AddASN1(cbasn1.Tag(0).ContextSpecific().Constructed(), func(b *cryptobyte.Builder) {
			b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // EnvelopedData
				b.AddASN1Int64(0)
				b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) {
					b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // KeyTransRecipientInfo
						b.AddASN1Int64(0)
						b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // IssuerAndSerialNumber
							b.AddBytes(cert.RawIssuer)
							b.AddASN1BigInt(cert.SerialNumber)
						})
						b.AddBytes(alg)
						b.AddASN1OctetString(ktDER)
					})
				})
				b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // EncryptedContentInfo
					b.AddASN1ObjectIdentifier(oidData)
					b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
						b.AddASN1ObjectIdentifier(gost.OIDGost28147)
						b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // Gost28147-89-Parameters
							b.AddASN1OctetString(iv)
							b.AddASN1ObjectIdentifier(contentSBox.OID)
						})
					})
					b.AddASN1(cbasn1.Tag(0).ContextSpecific(), func(b *cryptobyte.Builder) {
						b.AddBytes(ct)
					})
				})
			})
		})
	})
	return out.Bytes()
}

// octetString is the DER OCTET STRING of v: a GOST public key's value
// inside its BIT STRING.
func octetString(v []byte) []byte {
	var b cryptobyte.Builder
	b.AddASN1OctetString(v)
	return b.BytesOrPanic()
}
