package envelope

import (
	"crypto"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"

	"github.com/signagent/signagent/internal/gost"
	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// GOSTOpener is a key that opens a GOST key transport where the key is:
// the token derives the key-encryption key (VKO), unwraps the content key
// (the token checks its MAC) and decrypts the content, so the private key
// and the content key never leave it. pkcs11.Key is one.
type GOSTOpener interface {
	// CanOpenGOST says, before any challenge is asked for, why the key
	// cannot open one (the token lacks the mechanisms, the key may not
	// derive), or nil.
	CanOpenGOST() error
	// OpenGOST opens t and returns the content.
	OpenGOST(t *gost.Transport) ([]byte, error)
}

// CanOpen says, without asking the token for any decryption, why key
// cannot answer a challenge encrypted to cert, or nil: an RSA key that may
// not decrypt, a GOST key whose token cannot open a GOST key transport, a
// key of another kind.
func CanOpen(cert *x509.Certificate, key crypto.Decrypter) error {
	if _, ok := cert.PublicKey.(*rsa.PublicKey); ok {
		if k, ok := key.(interface{ CanDecrypt() error }); ok {
			return k.CanDecrypt()
		}
		return nil
	}
	if _, err := gost.PublicKeyOf(cert); err == nil {
		o, ok := key.(GOSTOpener)
		if !ok {
			return fmt.Errorf("certificate login with a GOST certificate is %w by this key (it cannot open a GOST key transport)", ErrUnsupported)
		}
		return o.CanOpenGOST()
	}
	if k, ok := key.(interface{ CanDecrypt() error }); ok {
		if err := k.CanDecrypt(); err != nil {
			return err // the key's own words: not an RSA key
		}
	}
	return fmt.Errorf("certificate login with a %s certificate is %w: RSA and GOST R 34.10-2012 certificates can log in", cert.PublicKeyAlgorithm, ErrUnsupported)
}

// openGOSTTransport has key open t, whose shape Read checked; everything
// happens on the token. Once the token is asked, every failure is
// ErrChallenge (the MAC the token checks on the content key is the only
// integrity the envelope has; CFB has none and no padding to leak).
func openGOSTTransport(t *gost.Transport, key crypto.Decrypter) ([]byte, error) {
	o, ok := key.(GOSTOpener)
	if !ok {
		return nil, fmt.Errorf("certificate login with a GOST certificate is %w by this key (it cannot open a GOST key transport)", ErrUnsupported)
	}
	if err := o.CanOpenGOST(); err != nil {
		return nil, err
	}
	plain, err := o.OpenGOST(t)
	if err != nil || len(plain) != len(t.Ciphertext) {
		clear(plain)
		return nil, ErrChallenge
	}
	return plain, nil
}

var (
	tagMaskKey    = cbasn1.Tag(0).ContextSpecific()
	tagTransport  = cbasn1.Tag(0).Constructed().ContextSpecific()
	tagEphemeral  = cbasn1.Tag(0).Constructed().ContextSpecific()
	errGOSTFormat = errors.New("not a GostR3410-KeyTransport")
)

// gostTransport checks a recipient's GOST key transport against the
// certificate's key (RFC 4490 section 5.2): the algorithm of the key's
// size, a strict DER GostR3410-KeyTransport with a 32-byte encrypted key,
// a 4-byte MAC and no mask, transport parameters with a known S-box, an
// ephemeral key on the certificate's curve and an 8-byte UKM.
func gostTransport(r *Recipient, pub *gost.PublicKey) (*gost.Transport, error) {
	bits := pub.Curve.Bits
	want := gost.OIDPublicKey256
	if bits == 512 {
		want = gost.OIDPublicKey512
	}
	if !r.Algorithm.Equal(want) {
		return nil, fmt.Errorf("%w: key transport %v is not GOST R 34.10-2012 %d-bit (%v), which this certificate's challenge uses", ErrNotChallenge, r.Algorithm, bits, want)
	}
	bad := func(what string) error {
		return fmt.Errorf("%w: the GOST key transport's %s", ErrNotChallenge, what)
	}
	s := cryptobyte.String(r.encryptedKey)
	var kt, ek, tp, enc, mac, ukm cryptobyte.String
	if !s.ReadASN1(&kt, cbasn1.SEQUENCE) || !s.Empty() || !kt.ReadASN1(&ek, cbasn1.SEQUENCE) {
		return nil, bad("encoding (" + errGOSTFormat.Error() + ")")
	}
	if !ek.ReadASN1(&enc, cbasn1.OCTET_STRING) || len(enc) != 32 {
		return nil, bad("encrypted key (not 32 bytes)")
	}
	if ek.PeekASN1Tag(tagMaskKey) {
		return nil, bad("mask key (present; a challenge has none)")
	}
	if !ek.ReadASN1(&mac, cbasn1.OCTET_STRING) || len(mac) != 4 || !ek.Empty() {
		return nil, bad("MAC (not 4 bytes)")
	}
	if !kt.ReadASN1(&tp, tagTransport) || !kt.Empty() {
		return nil, bad("transport parameters (absent)")
	}
	var set asn1.ObjectIdentifier
	var setDER, eph cryptobyte.String
	if !tp.ReadASN1Element(&setDER, cbasn1.OBJECT_IDENTIFIER) || !readOID(setDER, &set) {
		return nil, bad("key wrap parameter set")
	}
	if gost.Gost28147ParamSetName(set) == "" {
		return nil, bad(fmt.Sprintf("key wrap parameter set %v (unknown; known: %s)", set, paramSetNames()))
	}
	if !tp.ReadASN1(&eph, tagEphemeral) {
		return nil, bad("ephemeral key (absent)")
	}
	if !tp.ReadASN1(&ukm, cbasn1.OCTET_STRING) || !tp.Empty() {
		return nil, bad("UKM")
	}
	if len(ukm) != 8 {
		return nil, bad(fmt.Sprintf("UKM (%d bytes, not 8)", len(ukm)))
	}
	var b cryptobyte.Builder
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { b.AddBytes(eph) })
	spki, err := b.Bytes()
	if err != nil {
		return nil, bad("ephemeral key")
	}
	epk, err := gost.ParsePublicKeyInfo(spki)
	if err != nil {
		return nil, bad(fmt.Sprintf("ephemeral key (%v)", err))
	}
	if epk.Curve.Bits != bits || epk.Curve.P.Cmp(pub.Curve.P) != 0 || epk.Curve.A.Cmp(pub.Curve.A) != 0 ||
		epk.Curve.B.Cmp(pub.Curve.B) != 0 || epk.Curve.Q.Cmp(pub.Curve.Q) != 0 {
		return nil, bad(fmt.Sprintf("ephemeral key (on %s, not on the certificate's curve %s)", epk.Curve.Name, pub.Curve.Name))
	}
	return &gost.Transport{
		Bits:         bits,
		KeyTransport: append([]byte{}, r.encryptedKey...),
		Ephemeral:    epk.Bytes(),
		UKM:          append([]byte{}, ukm...),
		WrappedKey:   append(append([]byte{}, enc...), mac...),
		WrapParamSet: append([]byte{}, setDER...),
	}, nil
}

// gostContent checks the content's type, algorithm (id-Gost28147-89 with
// an 8-byte IV and a known S-box) and length (exactly size bytes: CFB has
// no padding, so the content is as long as the random), and fills them
// into t.
func (p *parsed) gostContent(t *gost.Transport, size int) error {
	if !p.contentType.Equal(oidData) {
		return fmt.Errorf("%w: the encrypted content's type is %v, not data", ErrNotChallenge, p.contentType)
	}
	if !p.contentAlg.Equal(gost.OIDGost28147) {
		return fmt.Errorf("%w: content encryption %v is not GOST 28147-89 (%v), which a GOST certificate's challenge uses", ErrNotChallenge, p.contentAlg, gost.OIDGost28147)
	}
	s := cryptobyte.String(p.contentIV)
	var params, iv, setDER cryptobyte.String
	var set asn1.ObjectIdentifier
	if !s.ReadASN1(&params, cbasn1.SEQUENCE) || !s.Empty() || !params.ReadASN1(&iv, cbasn1.OCTET_STRING) ||
		!params.ReadASN1Element(&setDER, cbasn1.OBJECT_IDENTIFIER) || !params.Empty() ||
		!readOID(setDER, &set) {
		return fmt.Errorf("%w: the GOST 28147-89 parameters are not an IV and a parameter set", ErrNotChallenge)
	}
	if len(iv) != 8 {
		return fmt.Errorf("%w: the GOST 28147-89 IV is %d bytes, not 8", ErrNotChallenge, len(iv))
	}
	if gost.Gost28147ParamSetName(set) == "" {
		return fmt.Errorf("%w: the content's GOST 28147-89 parameter set %v is unknown (known: %s)", ErrNotChallenge, set, paramSetNames())
	}
	if n := len(p.ciphertext); !p.hasContent || n != size {
		return fmt.Errorf("%w: the encrypted content is %d bytes; a challenge's random is %d", ErrNotChallenge, n, size)
	}
	t.IV = append([]byte{}, iv...)
	t.ContentParamSet = append([]byte{}, setDER...)
	t.Ciphertext = append([]byte{}, p.ciphertext...)
	return nil
}

func paramSetNames() string {
	out := ""
	for i, s := range gost.Gost28147ParamSets {
		if i > 0 {
			out += ", "
		}
		out += s.Name
	}
	return out
}

// readOID reads one DER OBJECT IDENTIFIER element, whole.
func readOID(der []byte, oid *asn1.ObjectIdentifier) bool {
	s := cryptobyte.String(der)
	return s.ReadASN1ObjectIdentifier(oid) && s.Empty()
}

// GOSTTransport reads a challenge addressed to a GOST certificate and
// returns what the token is given, with the same checks as Read (a random
// of ChallengeSize bytes), without asking any key: for `signagent token
// check`, which tries each way a token may open it.
func GOSTTransport(der []byte, cert *x509.Certificate) (*gost.Transport, error) {
	if _, err := gost.PublicKeyOf(cert); err != nil {
		return nil, fmt.Errorf("%w: the certificate's key is not GOST R 34.10-2012", ErrUnsupported)
	}
	c, err := Read(der, cert, ChallengeSize)
	if err != nil {
		return nil, err
	}
	return c.gost, nil
}
