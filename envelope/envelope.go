// Package envelope opens a CMS EnvelopedData (RFC 5652 section 6) with any
// crypto.Decrypter, so that the key-transport step runs where the key is
// (on the token, for certificate login) and only the content cipher runs
// here; and seals one, for the emulator.
//
// smallstep/pkcs7 does the cryptography. This package reads the recipient
// list itself first, so that an envelope that is not DER, not addressed to
// our certificate, or encrypted with a key-transport algorithm we do not
// have (GOST) is one clear error before the token is asked anything.
package envelope

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"sync"

	"github.com/smallstep/pkcs7"
)

var (
	// ErrMalformed: the bytes are not a DER CMS EnvelopedData.
	ErrMalformed = errors.New("not a CMS EnvelopedData")
	// ErrNotForUs: no recipient is our certificate.
	ErrNotForUs = errors.New("the envelope is not addressed to this certificate")
	// ErrUnsupported: a key-transport or content algorithm we do not have.
	ErrUnsupported = errors.New("not supported")
)

var (
	oidEnvelopedData = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 3}
	oidRSA           = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	oidRSAOAEP       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 7}
	// GOST key transport (R 34.10-2001, R 34.10-2012 256 and 512 bits),
	// which the real service uses for GOST certificates.
	gostPrefixes = []asn1.ObjectIdentifier{{1, 2, 643, 2, 2}, {1, 2, 643, 7, 1}}
)

type contentInfo struct {
	ContentType asn1.ObjectIdentifier
	Content     asn1.RawValue `asn1:"explicit,tag:0"`
}

type envelopedData struct {
	Version        int
	RecipientInfos []asn1.RawValue `asn1:"set"`
	Rest           asn1.RawValue   `asn1:"optional"`
}

type keyTransRecipient struct {
	Version   int
	Recipient asn1.RawValue // IssuerAndSerialNumber, or [0] SubjectKeyIdentifier
	Algorithm pkix.AlgorithmIdentifier
	Key       []byte
}

type issuerAndSerial struct {
	Issuer asn1.RawValue
	Serial *big.Int
}

// Recipient is one key-transport recipient of an envelope.
type Recipient struct {
	Algorithm asn1.ObjectIdentifier
	// Issuer (DER) and Serial, or SubjectKeyID, name the certificate.
	Issuer       []byte
	Serial       *big.Int
	SubjectKeyID []byte
}

// For says whether the recipient names cert.
func (r Recipient) For(cert *x509.Certificate) bool {
	if r.SubjectKeyID != nil {
		return bytes.Equal(r.SubjectKeyID, cert.SubjectKeyId)
	}
	return r.Serial != nil && r.Serial.Cmp(cert.SerialNumber) == 0 && bytes.Equal(r.Issuer, cert.RawIssuer)
}

// Recipients reads the key-transport recipients of a DER EnvelopedData.
func Recipients(der []byte) ([]Recipient, error) {
	var ci contentInfo
	rest, err := asn1.Unmarshal(der, &ci)
	if err != nil || len(rest) != 0 {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, why(err, rest))
	}
	if !ci.ContentType.Equal(oidEnvelopedData) {
		return nil, fmt.Errorf("%w: the content type is %v", ErrMalformed, ci.ContentType)
	}
	var ed envelopedData
	if rest, err := asn1.Unmarshal(ci.Content.Bytes, &ed); err != nil || len(rest) != 0 {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, why(err, rest))
	}
	var out []Recipient
	for _, raw := range ed.RecipientInfos {
		if raw.Class != asn1.ClassUniversal || raw.Tag != asn1.TagSequence {
			continue // key agreement, KEK, password or other recipients: not ours
		}
		var ktri keyTransRecipient
		if _, err := asn1.Unmarshal(raw.FullBytes, &ktri); err != nil {
			return nil, fmt.Errorf("%w: a recipient: %v", ErrMalformed, err)
		}
		r := Recipient{Algorithm: ktri.Algorithm.Algorithm}
		if ktri.Recipient.Class == asn1.ClassContextSpecific && ktri.Recipient.Tag == 0 {
			r.SubjectKeyID = ktri.Recipient.Bytes
		} else {
			var ias issuerAndSerial
			if _, err := asn1.Unmarshal(ktri.Recipient.FullBytes, &ias); err != nil {
				return nil, fmt.Errorf("%w: a recipient's issuer and serial: %v", ErrMalformed, err)
			}
			r.Issuer, r.Serial = ias.Issuer.FullBytes, ias.Serial
		}
		out = append(out, r)
	}
	return out, nil
}

func why(err error, rest []byte) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d bytes after the end", len(rest))
}

// Open decrypts the envelope addressed to cert with key, which does the
// key transport (RSA PKCS#1 v1.5, or OAEP when the recipient says so); the
// content cipher (AES-CBC, AES-GCM, 3DES-CBC) runs here.
func Open(der []byte, cert *x509.Certificate, key crypto.Decrypter) ([]byte, error) {
	rs, err := Recipients(der)
	if err != nil {
		return nil, err
	}
	var mine *Recipient
	for i := range rs {
		if rs[i].For(cert) {
			mine = &rs[i]
			break
		}
	}
	if mine == nil {
		return nil, fmt.Errorf("%w (%s, serial %X): it has %d other recipient(s)", ErrNotForUs, cert.Subject, cert.SerialNumber, len(rs))
	}
	switch alg := mine.Algorithm; {
	case alg.Equal(oidRSA), alg.Equal(oidRSAOAEP):
	case isGOST(alg):
		return nil, fmt.Errorf("GOST key transport (%v) is %w: only RSA certificates can log in here", alg, ErrUnsupported)
	default:
		return nil, fmt.Errorf("key transport %v is %w (RSA PKCS#1 v1.5 and RSA-OAEP are)", alg, ErrUnsupported)
	}
	p7, err := pkcs7.Parse(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	out, err := p7.Decrypt(cert, key)
	switch {
	case errors.Is(err, pkcs7.ErrUnsupportedAlgorithm), errors.Is(err, pkcs7.ErrUnsupportedEncryptionAlgorithm),
		errors.Is(err, pkcs7.ErrUnsupportedAsymmetricEncryptionAlgorithm):
		return nil, fmt.Errorf("the envelope's algorithm is %w: %v", ErrUnsupported, err)
	case err != nil:
		return nil, fmt.Errorf("could not open the envelope: %w", err)
	}
	return out, nil
}

func isGOST(alg asn1.ObjectIdentifier) bool {
	for _, p := range gostPrefixes {
		if len(alg) > len(p) && asn1.ObjectIdentifier(alg[:len(p)]).Equal(p) {
			return true
		}
	}
	return false
}

// sealMu serializes Seal: smallstep/pkcs7 takes its algorithms from package
// variables.
var sealMu sync.Mutex

// Seal encrypts content to cert with AES-256-CBC, the key transported with
// RSA PKCS#1 v1.5, or RSA-OAEP (SHA-1, which tokens such as SoftHSM offer)
// when oaep is set.
func Seal(content []byte, cert *x509.Certificate, oaep bool) ([]byte, error) {
	sealMu.Lock()
	defer sealMu.Unlock()
	pkcs7.ContentEncryptionAlgorithm = pkcs7.EncryptionAlgorithmAES256CBC
	pkcs7.KeyEncryptionAlgorithm = pkcs7.OIDEncryptionAlgorithmRSA
	if oaep {
		pkcs7.KeyEncryptionAlgorithm = pkcs7.OIDEncryptionAlgorithmRSAESOAEP
		pkcs7.KeyEncryptionHash = crypto.SHA1
	}
	return pkcs7.Encrypt(content, []*x509.Certificate{cert})
}
