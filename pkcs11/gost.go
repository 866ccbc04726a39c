package pkcs11

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"slices"

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

func isGOSTKeyType(t uint) bool { return t == CKK_GOSTR3410 || t == CKK_GOSTR3410_512 }

// gostBits is a GOST key type's size.
func gostBits(keyType uint) int {
	if keyType == CKK_GOSTR3410_512 {
		return 512
	}
	return 256
}

// gostWays is how a GOST key signs on its token, chosen once from the
// mechanism list: with the hashing mechanism where the token has it,
// otherwise Streebog on the token (C_Digest) and the raw mechanism over it,
// otherwise Streebog here and the raw mechanism (gostraw.go).
type gostWays struct {
	bits   int
	hashed uint // CKM_GOSTR3410_WITH_GOSTR3411_12_*, or 0
	raw    uint // CKM_GOSTR3410(_512), or 0
	digest uint // CKM_GOSTR3411_12_*, or 0
}

func gostMechanisms(bits int) (hashed, raw, digest uint) {
	if bits == 512 {
		return CKM_GOSTR3410_WITH_GOSTR3411_12_512, CKM_GOSTR3410_512, CKM_GOSTR3411_12_512
	}
	return CKM_GOSTR3410_WITH_GOSTR3411_12_256, CKM_GOSTR3410, CKM_GOSTR3411_12_256
}

// MechanismName names the GOST mechanisms as OpenSC's pkcs11-tool does.
func MechanismName(m uint) string {
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

// chooseGOSTWays picks the signing path from the token's mechanisms, or
// says which mechanisms are missing.
func chooseGOSTWays(bits int, offered []uint, token, key string) (gostWays, error) {
	has := func(m uint) bool { return slices.Contains(offered, m) }
	hashed, raw, digest := gostMechanisms(bits)
	w := gostWays{bits: bits}
	if has(hashed) {
		w.hashed = hashed
	}
	if has(raw) {
		w.raw = raw
	}
	if has(digest) {
		w.digest = digest
	}
	if w.hashed == 0 && w.raw == 0 {
		return w, fmt.Errorf("%w: token %q cannot sign with the GOST %d-bit key %q: it offers no GOST signature mechanism (neither %s nor %s)", tokenerr.ErrKeyUsage, token, bits, key, MechanismName(hashed), MechanismName(raw))
	}
	return w, nil
}

// gostPublic builds a GOST public key from a public key object's
// parameter set and value.
func gostPublic(keyType uint, a map[uint][]byte) (*gost.PublicKey, error) {
	var oid asn1.ObjectIdentifier
	if _, err := asn1.Unmarshal(a[CKA_GOSTR3410_PARAMS], &oid); err != nil {
		return nil, errors.New("its CKA_GOSTR3410_PARAMS is not an object identifier")
	}
	bits := gostBits(keyType)
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

// IsGOST tells whether the key is a GOST R 34.10-2012 key: such a key
// hashes on the token (SignMessage, Digest).
func (k *Key) IsGOST() bool { return isGOSTKeyType(k.keyType) }

// SignMessage signs msg with a GOST key, hashing on the token: with the
// hashing mechanism, or C_Digest and the raw mechanism, in one session; on
// a token that offers only the raw mechanism, hashing here (gostraw.go). The
// value is s then r, as CMS carries it. It implements crypto.MessageSigner.
// RSA and EC keys hash msg here with opts' hash and sign the digest, as
// crypto.SignMessage would (crypto/x509 calls SignMessage when a key has it).
func (k *Key) SignMessage(_ io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), k.tok.timeout)
	defer cancel()
	return k.SignMessageContext(ctx, msg, opts)
}

// SignMessageContext is SignMessage bounded by ctx.
func (k *Key) SignMessageContext(ctx context.Context, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	if !k.IsGOST() {
		if opts == nil || !opts.HashFunc().Available() {
			return nil, fmt.Errorf("%w: key %q signs a hash; name one", tokenerr.ErrKeyUsage, k.label)
		}
		h := opts.HashFunc().New()
		h.Write(msg)
		return k.SignContext(ctx, h.Sum(nil), opts)
	}
	if !k.sign {
		return nil, fmt.Errorf("%w: key %q may not sign (CKA_SIGN is false)", tokenerr.ErrKeyUsage, k.label)
	}
	w := k.gost
	sig, err := k.do(ctx, fmt.Sprintf("sign with key %q", k.label), func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		return w.signMessage(b, sh, h, msg)
	})
	if err != nil {
		return nil, err
	}
	return k.checkGOSTLength(sig)
}

// signGOSTDigest signs a Streebog hash computed elsewhere with the raw
// mechanism (crypto.Signer's Sign for a GOST key).
func (k *Key) signGOSTDigest(ctx context.Context, digest []byte) ([]byte, error) {
	w := k.gost
	if w.raw == 0 {
		return nil, fmt.Errorf("%w: token %q signs GOST only over the data it hashes itself (%s), not over a given hash", tokenerr.ErrKeyUsage, k.tok.info.Label, MechanismName(w.hashed))
	}
	if len(digest) != w.bits/8 {
		return nil, fmt.Errorf("%w: the hash is %d bytes, a GOST %d-bit key signs %d", tokenerr.ErrKeyUsage, len(digest), w.bits, w.bits/8)
	}
	sig, err := k.do(ctx, fmt.Sprintf("sign with key %q", k.label), func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		return signOn(b, sh, h, w.raw, digest)
	})
	if err != nil {
		return nil, err
	}
	return k.checkGOSTLength(sig)
}

func (k *Key) checkGOSTLength(sig []byte) ([]byte, error) {
	if want := k.gost.bits / 4; len(sig) != want {
		return nil, fmt.Errorf("%w: token %q returned a %d-byte signature; a GOST R 34.10-2012 %d-bit key makes %d", tokenerr.ErrTokenRefused, k.tok.info.Label, len(sig), k.gost.bits, want)
	}
	return sig, nil
}

// ErrNoDigest is returned by Digest when the token offers no Streebog.
var ErrNoDigest = fmt.Errorf("%w: the token offers no Streebog digest mechanism", errors.ErrUnsupported)

// Digest returns Streebog of msg (the key's size) computed on the token,
// within the selection's timeout.
func (k *Key) Digest(msg []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), k.tok.timeout)
	defer cancel()
	return k.DigestContext(ctx, msg)
}

// DigestContext is Digest bounded by ctx.
func (k *Key) DigestContext(ctx context.Context, msg []byte) ([]byte, error) {
	if !k.IsGOST() || k.gost.digest == 0 {
		return nil, ErrNoDigest
	}
	sum, err := k.do(ctx, "hash on the token", func(b Backend, sh p11.SessionHandle, _ p11.ObjectHandle) ([]byte, error) {
		return digestOn(b, sh, k.gost.digest, msg)
	})
	if err != nil {
		return nil, err
	}
	if len(sum) != k.gost.bits/8 {
		return nil, fmt.Errorf("%w: token %q returned a %d-byte Streebog-%d hash", tokenerr.ErrTokenRefused, k.tok.info.Label, len(sum), k.gost.bits)
	}
	return sum, nil
}

func signOn(b Backend, sh p11.SessionHandle, h p11.ObjectHandle, mech uint, data []byte) ([]byte, error) {
	if err := b.SignInit(sh, []*p11.Mechanism{p11.NewMechanism(mech, nil)}, h); err != nil {
		return nil, err
	}
	return b.Sign(sh, data)
}

func digestOn(b Backend, sh p11.SessionHandle, mech uint, msg []byte) ([]byte, error) {
	if err := b.DigestInit(sh, []*p11.Mechanism{p11.NewMechanism(mech, nil)}); err != nil {
		return nil, err
	}
	return b.Digest(sh, msg)
}

// chooseGOST asks the token's mechanism list once and picks how the key
// signs.
func (t *Token) chooseGOST(ctx context.Context, k *Key) error {
	mechs, err := call(ctx, t.mod, func(b Backend) ([]*p11.Mechanism, error) { return b.GetMechanismList(t.info.Slot) }, nil)
	if err != nil {
		return tokenerr.Classify("list the token's mechanisms", err)
	}
	offered := make([]uint, len(mechs))
	for i, m := range mechs {
		offered[i] = m.Mechanism
	}
	w, err := chooseGOSTWays(gostBits(k.keyType), offered, t.info.Label, k.label)
	if err != nil {
		return err
	}
	k.gost = w
	ev := t.log.Debug()
	if w.inSignagent() {
		ev = t.log.Info() // not what a GOST token usually does: say so
	}
	ev.Str("key", k.label).Str("way", w.describe()).Msg("how the GOST key signs")
	return nil
}
