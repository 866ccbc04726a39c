// Package envelope opens the service's certificate-login challenge, a CMS
// EnvelopedData (RFC 5652 section 6), with any crypto.Decrypter, so that
// the key-transport step runs where the key is (on the token) and only the
// content cipher runs here; and seals one, for the emulator.
//
// This package reads the envelope itself and opens only the challenge's
// shape (see Open): an envelope that is not DER, not addressed to our
// certificate alone, or not a 32-byte random under RSA key transport and
// AES-CBC is one clear error before the token is asked anything.
// smallstep/pkcs7 seals.
package envelope

import (
	"crypto"
	"crypto/x509"
	"errors"
	"sync"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/gost"
	"github.com/smallstep/pkcs7"
)

var (
	// ErrNotChallenge is the class of every refusal of Open: the envelope
	// is not a challenge this certificate answers. ErrMalformed,
	// ErrNotForUs and ErrChallenge are of this class too.
	ErrNotChallenge = errdefs.New(errdefs.ErrUnreachable, "not a certificate-login challenge")
	// ErrMalformed: the bytes are not a DER CMS EnvelopedData.
	ErrMalformed error = refusal("not a CMS EnvelopedData")
	// ErrNotForUs: no recipient is our certificate.
	ErrNotForUs error = refusal("the envelope is not addressed to this certificate")
	// ErrChallenge is the one error of every failure once the token has
	// been asked (see Open): it says nothing of why.
	ErrChallenge error = refusal("the challenge does not open with this certificate's key to a random of a challenge's length; nothing was sent back")
	// ErrUnsupported: a key-transport algorithm or key we do not have (GOST).
	ErrUnsupported = errdefs.New(errdefs.ErrNotConfigured, "not supported")
)

// refusal is an error of the class ErrNotChallenge.
type refusal string

func (r refusal) Error() string { return string(r) }

// Is makes a refusal match ErrNotChallenge, and so its kind.
func (r refusal) Is(target error) bool {
	return target == ErrNotChallenge || errors.Is(ErrNotChallenge, target)
}

// sealMu serializes Seal: smallstep/pkcs7 takes its algorithms from package
// variables.
var sealMu sync.Mutex

// Seal encrypts content to cert with AES-256-CBC, the key transported with
// RSA PKCS#1 v1.5, or RSA-OAEP (SHA-1, which tokens such as SoftHSM offer)
// when oaep is set. To a GOST R 34.10-2012 certificate it seals as the
// service does, with SealGOST and the content S-box CryptoPro-A (oaep does
// not apply).
func Seal(content []byte, cert *x509.Certificate, oaep bool) ([]byte, error) {
	if _, err := gost.PublicKeyOf(cert); !errors.Is(err, gost.ErrNotGOST) {
		return SealGOST(content, cert, gost.SBoxCryptoProA)
	}
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
