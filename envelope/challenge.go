package envelope

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"fmt"
	"math/big"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/gost"
	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// ChallengeSize is the length of the random a certificate login's
// challenge holds (the emulator's and, per the wire notes, the service's):
// the only length Open opens, unless a Reader is told another.
const ChallengeSize = 32

// The bounds of a challenge size a setting may give (a real service's
// capture may show another length than ChallengeSize).
const (
	MinChallengeSize = 16
	MaxChallengeSize = 256
)

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
// with key, and returns its random of ChallengeSize bytes: Read, then the
// Challenge's Open. See Read for what is refused before the token is
// asked.
func Open(der []byte, cert *x509.Certificate, key crypto.Decrypter) ([]byte, error) {
	c, err := Read(der, cert, ChallengeSize)
	if err != nil {
		return nil, err
	}
	return c.Open(key)
}

// Challenge is a certificate-login challenge whose shape has been checked
// (Read) and that has not been opened: its TransportID names its key
// transport, so that a caller can refuse one it has opened before, and
// Open has the token open it.
type Challenge struct {
	size int
	id   [32]byte
	// A GOST certificate's: everything the token is given.
	gost *gost.Transport
	// An RSA certificate's: the key transport for the token, the content
	// cipher's key length and IV, and the ciphertext.
	encryptedKey []byte
	opts         crypto.DecrypterOpts
	keyLen       int
	iv           []byte
	ciphertext   []byte
}

// Read checks that der is the service's challenge addressed to cert and
// holding a random of exactly size bytes, without asking any key.
//
// Whoever answers at the API address chooses the envelope, so a challenge
// is not a general decryption: opening anything would make the token a
// decryption oracle for whatever is encrypted to the certificate (GOST
// 28147-89 CFB has no integrity: windows of a document sealed to the
// certificate, each with the block before it as IV, open one by one), and
// RSA PKCS#1 v1.5 on demand a padding oracle against the key that also
// signs. Only the challenge's shape is opened: one KeyTransRecipientInfo
// naming cert; for an RSA certificate, RSA key transport with the
// certificate's modulus length, AES-CBC with a key of exactly its length
// and content of exactly size bytes and its PKCS#7 padding; for a GOST R
// 34.10-2012 certificate, the GOST key transport of the key's size (RFC
// 4490) and GOST 28147-89 content of exactly size bytes. Anything else is
// refused here (ErrMalformed, ErrNotForUs, ErrUnsupported or
// ErrNotChallenge, with the reason). size is ChallengeSize unless a real
// service's capture says otherwise, from MinChallengeSize to
// MaxChallengeSize.
func Read(der []byte, cert *x509.Certificate, size int) (*Challenge, error) {
	if size < MinChallengeSize || size > MaxChallengeSize {
		return nil, fmt.Errorf("%w: a challenge size of %d bytes (from %d to %d)", errdefs.ErrInvalidInput, size, MinChallengeSize, MaxChallengeSize)
	}
	p, r, err := readFor(der, cert)
	if err != nil {
		return nil, err
	}
	c := &Challenge{size: size}
	if pub, err := gost.PublicKeyOf(cert); err == nil {
		t, err := gostTransport(r, pub)
		if err != nil {
			return nil, err
		}
		if err := p.gostContent(t, size); err != nil {
			return nil, err
		}
		c.gost = t
		// The wrapped content key (with its MAC) names the key transport:
		// a content key wrapped under a key-encryption key opens only as
		// this very wrap, and the same wrap sent with another encoding of
		// the ephemeral key (a point plus one of small order, on a curve
		// with a cofactor: VKO multiplies it away) or another window of
		// the content is the same key transport.
		c.id = transportID("gost", t.WrappedKey)
		return c, nil
	}
	opts, err := keyTransport(r, cert)
	if err != nil {
		return nil, err
	}
	keyLen, iv, err := p.content(size)
	if err != nil {
		return nil, err
	}
	c.encryptedKey, c.opts, c.keyLen, c.iv, c.ciphertext = r.encryptedKey, opts, keyLen, iv, p.ciphertext
	c.id = transportID("rsa", r.encryptedKey)
	return c, nil
}

// transportID is a SHA-256 over a key transport's parts, each with its
// length, under a label of its kind.
func transportID(kind string, parts ...[]byte) [32]byte {
	h := sha256.New()
	h.Write([]byte("signagent key transport\x00" + kind))
	for _, p := range parts {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var id [32]byte
	h.Sum(id[:0])
	return id
}

// TransportID names the challenge's key transport: the GOST wrapped
// content key, or the RSA encrypted key (below the modulus). A service makes a new one for
// every challenge; one seen before is a replay of a key transport the
// token has opened (its content key known to whoever holds it), and is
// not to be opened again.
func (c *Challenge) TransportID() [32]byte { return c.id }

// Size is the length of the random the challenge holds.
func (c *Challenge) Size() int { return c.size }

// Open has key open the challenge and returns its random. For an RSA
// certificate, key does the key transport (on the token: RSA PKCS#1 v1.5,
// or OAEP when the recipient says so) and the content cipher (AES-CBC)
// runs here. For a GOST R 34.10-2012 certificate, key must be a
// GOSTOpener and everything runs on the token (see openGOSTTransport).
// A key that says it may not decrypt is refused without asking the token.
// Once the token has been asked, every failure (the token's own refusal
// of the key transport, a key of the wrong length, wrong content padding
// or length) is the same ErrChallenge: a failed key transport continues
// with a random content key (RFC 3218 section 2.3.2), so that every
// failure ends at the same check.
func (c *Challenge) Open(key crypto.Decrypter) ([]byte, error) {
	if c.gost != nil {
		return openGOSTTransport(c.gost, key)
	}
	// pkcs11.Key knows from the key's attributes whether it may decrypt.
	if k, ok := key.(interface{ CanDecrypt() error }); ok {
		if err := k.CanDecrypt(); err != nil {
			return nil, err
		}
	}
	opts := c.opts
	if _, ok := opts.(*rsa.PKCS1v15DecryptOptions); ok {
		// A software key then does the same as below itself (crypto/rsa).
		opts = &rsa.PKCS1v15DecryptOptions{SessionKeyLen: c.keyLen}
	}
	return openContent(c.ciphertext, c.iv, c.keyLen, c.size, func() ([]byte, error) {
		return key.Decrypt(rand.Reader, c.encryptedKey, opts)
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
	// c and c+N decrypt alike on a token that does not refuse a value past
	// the modulus: only the one encoding below N is a key transport, so
	// that one seen before cannot come back as another (TransportID).
	if new(big.Int).SetBytes(r.encryptedKey).Cmp(pub.N) >= 0 {
		return nil, fmt.Errorf("%w: the encrypted key is not below the certificate's RSA modulus", ErrNotChallenge)
	}
	return opts, nil
}

// content checks the content's type, algorithm and length (size bytes
// and their PKCS#7 padding); it returns the content key's length and the
// IV.
func (p *parsed) content(size int) (int, []byte, error) {
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
	if want := paddedLen(size); !p.hasContent || len(p.ciphertext) != want {
		return 0, nil, fmt.Errorf("%w: the encrypted content is %d bytes; a challenge's %d-byte random makes %d",
			ErrNotChallenge, len(p.ciphertext), size, want)
	}
	return keyLen, iv, nil
}

// openContent runs the key transport (transport) and decrypts the content.
// Every failure from here on is ErrChallenge and nothing else: no error of
// the token, no length, no padding detail, so that a service cannot tell a
// failed key transport from a bad content padding.
func openContent(ciphertext, iv []byte, keyLen, size int, transport func() ([]byte, error)) ([]byte, error) {
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
	// PKCS#7 padding of a random of size bytes: pad bytes of value pad
	// (a whole block of 16s after a random of whole blocks). Checked
	// without an early exit.
	pad := byte(len(plain) - size)
	var bad byte
	for _, b := range plain[size:] {
		bad |= b ^ pad
	}
	if bad != 0 {
		return nil, ErrChallenge
	}
	return append([]byte{}, plain[:size]...), nil
}

// paddedLen is the length of size bytes under a block cipher with PKCS#7
// padding: at least one byte of padding, up to a whole block.
func paddedLen(size int) int { return size + aes.BlockSize - size%aes.BlockSize }

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
