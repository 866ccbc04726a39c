package envelope

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"fmt"

	"github.com/signagent/signagent/internal/gost"
	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// ChallengeSize is the length of the random a certificate login's
// challenge holds (the emulator's and, per the wire notes, the service's).
const ChallengeSize = 32

// challengeCiphertext is the length of ChallengeSize bytes under AES-CBC
// with PKCS#7 padding: a whole block of padding follows.
const challengeCiphertext = ChallengeSize + aes.BlockSize

var (
	oidRSA        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	oidRSAOAEP    = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 7}
	oidMGF1       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 8}
	oidPSpecified = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 9}
	oidSHA1       = asn1.ObjectIdentifier{1, 3, 14, 3, 2, 26}
	oidSHA256     = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}
	// GOST key transport (R 34.10-2001, R 34.10-2012 256 and 512 bits),
	// which the real service uses for GOST certificates.
	gostPrefixes = []asn1.ObjectIdentifier{{1, 2, 643, 2, 2}, {1, 2, 643, 7, 1}}

	// contentCiphers is the allow-list of content-encryption algorithms,
	// with the length of their keys: AES-CBC, as the wire notes choose.
	contentCiphers = []struct {
		oid    asn1.ObjectIdentifier
		keyLen int
	}{
		{asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 2}, 16},  // AES-128-CBC
		{asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 22}, 24}, // AES-192-CBC
		{asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 42}, 32}, // AES-256-CBC
	}
)

// Open opens the service's certificate-login challenge addressed to cert
// with key, and returns its random. For an RSA certificate, key does the
// key transport (on the token: RSA PKCS#1 v1.5, or OAEP when the recipient
// says so) and the content cipher (AES-CBC) runs here; the random is
// ChallengeSize bytes. For a GOST R 34.10-2012 certificate, key must be a
// GOSTOpener and everything runs on the token (see openGOST); the random
// is MinGOSTChallenge to MaxGOSTChallenge bytes.
//
// Whoever answers at the API address chooses the envelope, so Open is not
// a general decryption: it would make the token a decryption oracle for
// anything encrypted to the certificate, and RSA PKCS#1 v1.5 on demand a
// padding oracle against the key that also signs. Only the challenge's
// shape is opened: one KeyTransRecipientInfo naming cert, RSA key
// transport with the certificate's modulus length, AES-CBC with a key of
// exactly its length, and content of exactly ChallengeSize bytes. Anything
// else is refused before the token is asked (ErrMalformed, ErrNotForUs,
// ErrUnsupported or ErrNotChallenge, with the reason). Once the token has
// been asked, every failure (the token's own refusal of the key transport,
// a key of the wrong length, wrong content padding or length) is the same
// ErrChallenge: a failed key transport continues with a random content key
// (RFC 3218 section 2.3.2), so that every failure ends at the same check.
func Open(der []byte, cert *x509.Certificate, key crypto.Decrypter) ([]byte, error) {
	p, r, err := readFor(der, cert)
	if err != nil {
		return nil, err
	}
	if pub, err := gost.PublicKeyOf(cert); err == nil {
		return openGOST(p, r, pub, key)
	}
	opts, err := keyTransport(r, cert)
	if err != nil {
		return nil, err
	}
	keyLen, iv, err := p.content()
	if err != nil {
		return nil, err
	}
	// A key that says it may not decrypt is refused without asking the
	// token (pkcs11.Key knows this from the key's attributes).
	if k, ok := key.(interface{ CanDecrypt() error }); ok {
		if err := k.CanDecrypt(); err != nil {
			return nil, err
		}
	}
	if o, ok := opts.(*rsa.PKCS1v15DecryptOptions); ok {
		// A software key then does the same as below itself (crypto/rsa).
		o.SessionKeyLen = keyLen
	}
	return openContent(p.ciphertext, iv, keyLen, func() ([]byte, error) {
		return key.Decrypt(rand.Reader, r.encryptedKey, opts)
	})
}

// readFor reads an envelope and its one recipient, which must be cert.
func readFor(der []byte, cert *x509.Certificate) (*parsed, *Recipient, error) {
	p, err := parse(der)
	if err != nil {
		return nil, nil, err
	}
	r, err := p.recipientFor(cert)
	if err != nil {
		return nil, nil, err
	}
	return p, r, nil
}

// recipientFor checks that the envelope has exactly one recipient, a
// KeyTransRecipientInfo naming cert, and nothing else around it.
func (p *parsed) recipientFor(cert *x509.Certificate) (*Recipient, error) {
	switch n := len(p.recipients) + p.others; {
	case p.others > 0:
		return nil, fmt.Errorf("%w: it has a recipient that is not key transport; a challenge has one KeyTransRecipientInfo", ErrNotChallenge)
	case n == 0:
		return nil, fmt.Errorf("%w: it has no recipient", ErrNotChallenge)
	case n > 1:
		for _, r := range p.recipients {
			if r.For(cert) {
				return nil, fmt.Errorf("%w: it has %d recipients; a challenge has one", ErrNotChallenge, n)
			}
		}
		return nil, fmt.Errorf("%w (%s, serial %X): it has %d other recipients", ErrNotForUs, cert.Subject, cert.SerialNumber, n)
	}
	r := &p.recipients[0]
	if !r.For(cert) {
		return nil, fmt.Errorf("%w (%s, serial %X): it has 1 other recipient", ErrNotForUs, cert.Subject, cert.SerialNumber)
	}
	if p.extras {
		return nil, fmt.Errorf("%w: it carries originatorInfo or unprotectedAttrs", ErrNotChallenge)
	}
	if p.version != 0 && p.version != 2 {
		return nil, fmt.Errorf("%w: EnvelopedData version %d", ErrNotChallenge, p.version)
	}
	return r, nil
}

// keyTransport checks the recipient's key-transport algorithm against
// cert's key and returns the options for the token's Decrypt.
func keyTransport(r *Recipient, cert *x509.Certificate) (crypto.DecrypterOpts, error) {
	alg := r.Algorithm
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("certificate login with a %s certificate is %w: RSA and GOST R 34.10-2012 certificates can log in", cert.PublicKeyAlgorithm, ErrUnsupported)
	}
	if isGOST(alg) {
		return nil, fmt.Errorf("%w: GOST key transport (%v) to an RSA certificate", ErrNotChallenge, alg)
	}
	var opts crypto.DecrypterOpts
	switch {
	case alg.Equal(oidRSA):
		if r.params != nil && !isNULL(r.params) {
			return nil, fmt.Errorf("%w: RSA PKCS#1 v1.5 key transport with parameters", ErrNotChallenge)
		}
		opts = &rsa.PKCS1v15DecryptOptions{}
	case alg.Equal(oidRSAOAEP):
		h, err := oaepHash(r.params)
		if err != nil {
			return nil, fmt.Errorf("%w: RSA-OAEP key transport %v", ErrNotChallenge, err)
		}
		opts = &rsa.OAEPOptions{Hash: h}
	default:
		return nil, fmt.Errorf("%w: key transport %v is not RSA PKCS#1 v1.5 or RSA-OAEP, which an RSA certificate's challenge uses", ErrNotChallenge, alg)
	}
	if want := pub.Size(); len(r.encryptedKey) != want {
		return nil, fmt.Errorf("%w: the encrypted key is %d bytes; the certificate's RSA key makes %d", ErrNotChallenge, len(r.encryptedKey), want)
	}
	return opts, nil
}

// content checks the content's type, algorithm and length; it returns the
// content key's length and the IV.
func (p *parsed) content() (int, []byte, error) {
	if !p.contentType.Equal(oidData) {
		return 0, nil, fmt.Errorf("%w: the encrypted content's type is %v, not data", ErrNotChallenge, p.contentType)
	}
	keyLen := 0
	for _, c := range contentCiphers {
		if p.contentAlg.Equal(c.oid) {
			keyLen = c.keyLen
		}
	}
	if keyLen == 0 {
		return 0, nil, fmt.Errorf("%w: content encryption %v is not AES-CBC", ErrNotChallenge, p.contentAlg)
	}
	s := cryptobyte.String(p.contentIV)
	var iv []byte
	if !s.ReadASN1Bytes(&iv, cbasn1.OCTET_STRING) || !s.Empty() || len(iv) != aes.BlockSize {
		return 0, nil, fmt.Errorf("%w: the AES-CBC parameters are not a %d-byte IV", ErrNotChallenge, aes.BlockSize)
	}
	if !p.hasContent || len(p.ciphertext) != challengeCiphertext {
		return 0, nil, fmt.Errorf("%w: the encrypted content is %d bytes; a challenge's %d-byte random makes %d",
			ErrNotChallenge, len(p.ciphertext), ChallengeSize, challengeCiphertext)
	}
	return keyLen, iv, nil
}

// openContent runs the key transport (transport) and decrypts the content.
// Every failure from here on is ErrChallenge and nothing else: no error of
// the token, no length, no padding detail, so that a service cannot tell a
// failed key transport from a bad content padding.
func openContent(ciphertext, iv []byte, keyLen int, transport func() ([]byte, error)) ([]byte, error) {
	cek := make([]byte, keyLen)
	if _, err := rand.Read(cek); err != nil {
		return nil, ErrChallenge
	}
	got, err := transport()
	if err == nil && len(got) == keyLen {
		copy(cek, got)
	}
	clear(got)
	defer clear(cek)
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, ErrChallenge
	}
	plain := make([]byte, len(ciphertext))
	defer clear(plain)
	cipher.NewCBCDecrypter(block, iv).CryptBlocks(plain, ciphertext)
	// The random fills two blocks; PKCS#7 padding is then one whole block
	// of bytes 16. Checked without an early exit.
	var bad byte
	for _, b := range plain[ChallengeSize:] {
		bad |= b ^ aes.BlockSize
	}
	if bad != 0 {
		return nil, ErrChallenge
	}
	return append([]byte{}, plain[:ChallengeSize]...), nil
}

// oaepHash reads RSAES-OAEP-params (RFC 4055 section 4.1) and returns the
// hash, when it is SHA-1 or SHA-256 with MGF1 over the same hash and an
// empty label, which is what a token's CKM_RSA_PKCS_OAEP is given.
func oaepHash(params []byte) (crypto.Hash, error) {
	if params == nil {
		return 0, fmt.Errorf("without parameters")
	}
	s := cryptobyte.String(params)
	var seq cryptobyte.String
	if !s.ReadASN1(&seq, cbasn1.SEQUENCE) || !s.Empty() {
		return 0, fmt.Errorf("parameters are not RSAES-OAEP-params")
	}
	hash, mgfHash := oidSHA1, oidSHA1 // the defaults
	var hashAlg, mgfAlg, pSource cryptobyte.String
	var hasHash, hasMGF, hasSource bool
	if !seq.ReadOptionalASN1(&hashAlg, &hasHash, cbasn1.Tag(0).Constructed().ContextSpecific()) ||
		!seq.ReadOptionalASN1(&mgfAlg, &hasMGF, cbasn1.Tag(1).Constructed().ContextSpecific()) ||
		!seq.ReadOptionalASN1(&pSource, &hasSource, cbasn1.Tag(2).Constructed().ContextSpecific()) || !seq.Empty() {
		return 0, fmt.Errorf("parameters are not RSAES-OAEP-params")
	}
	if hasHash {
		oid, p, err := readAlgorithm(&hashAlg)
		if err != nil || !hashAlg.Empty() || (p != nil && !isNULL(p)) {
			return 0, fmt.Errorf("with a malformed hash algorithm")
		}
		hash = oid
	}
	if hasMGF {
		oid, p, err := readAlgorithm(&mgfAlg)
		if err != nil || !mgfAlg.Empty() || !oid.Equal(oidMGF1) {
			return 0, fmt.Errorf("with a mask generation other than MGF1")
		}
		ps := cryptobyte.String(p)
		h, hp, err := readAlgorithm(&ps)
		if err != nil || !ps.Empty() || (hp != nil && !isNULL(hp)) {
			return 0, fmt.Errorf("with malformed MGF1 parameters")
		}
		mgfHash = h
	}
	if hasSource {
		oid, p, err := readAlgorithm(&pSource)
		ps := cryptobyte.String(p)
		var label []byte
		if err != nil || !pSource.Empty() || !oid.Equal(oidPSpecified) || !ps.ReadASN1Bytes(&label, cbasn1.OCTET_STRING) || !ps.Empty() || len(label) != 0 {
			return 0, fmt.Errorf("with a label")
		}
	}
	if !mgfHash.Equal(hash) {
		return 0, fmt.Errorf("with MGF1 over %v and the hash %v", mgfHash, hash)
	}
	switch {
	case hash.Equal(oidSHA1):
		return crypto.SHA1, nil
	case hash.Equal(oidSHA256):
		return crypto.SHA256, nil
	}
	return 0, fmt.Errorf("with the hash %v (SHA-1 and SHA-256 are accepted)", hash)
}

func isNULL(der []byte) bool { return len(der) == 2 && der[0] == 0x05 && der[1] == 0x00 }

func isGOST(alg asn1.ObjectIdentifier) bool {
	for _, p := range gostPrefixes {
		if len(alg) > len(p) && asn1.ObjectIdentifier(alg[:len(p)]).Equal(p) {
			return true
		}
	}
	return false
}
