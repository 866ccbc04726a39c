package pkcs11

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostmech"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// IsGOST tells whether the key is a GOST R 34.10-2012 key: such a key
// hashes on the token (SignMessage, Digest).
func (k *Key) IsGOST() bool { return gostmech.IsKeyType(k.keyType) }

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
		return gostSign(w, b, sh, h, msg)
	})
	if err != nil {
		return nil, err
	}
	return gostLength(sig, k.gost.Bits, k.tok.info.Label)
}

// signGOSTDigest signs a Streebog hash computed elsewhere with the raw
// mechanism (crypto.Signer's Sign for a GOST key).
func (k *Key) signGOSTDigest(ctx context.Context, digest []byte) ([]byte, error) {
	w := k.gost
	if w.Raw == 0 {
		return nil, fmt.Errorf("%w: token %q signs GOST only over the data it hashes itself (%s), not over a given hash", tokenerr.ErrKeyUsage, k.tok.info.Label, gostmech.Name(w.Hashed))
	}
	if len(digest) != w.Bits/8 {
		return nil, fmt.Errorf("%w: the hash is %d bytes, a GOST %d-bit key signs %d", tokenerr.ErrKeyUsage, len(digest), w.Bits, w.Bits/8)
	}
	sig, err := k.do(ctx, fmt.Sprintf("sign with key %q", k.label), func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		return signOn(b, sh, h, w.Raw, digest)
	})
	if err != nil {
		return nil, err
	}
	return gostLength(sig, k.gost.Bits, k.tok.info.Label)
}

// gostLength refuses a signature of another length than a GOST key of
// bits makes (a token's mistake), naming the token.
func gostLength(sig []byte, bits int, token string) ([]byte, error) {
	if want := bits / 4; len(sig) != want {
		return nil, fmt.Errorf("%w: token %q returned a %d-byte signature; a GOST R 34.10-2012 %d-bit key makes %d", tokenerr.ErrTokenRefused, token, len(sig), bits, want)
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
	if !k.IsGOST() || k.gost.Digest == 0 {
		return nil, ErrNoDigest
	}
	sum, err := k.do(ctx, "hash on the token", func(b Backend, sh p11.SessionHandle, _ p11.ObjectHandle) ([]byte, error) {
		return digestOn(b, sh, k.gost.Digest, msg)
	})
	if err != nil {
		return nil, err
	}
	if len(sum) != k.gost.Bits/8 {
		return nil, fmt.Errorf("%w: token %q returned a %d-byte Streebog-%d hash", tokenerr.ErrTokenRefused, k.tok.info.Label, len(sum), k.gost.Bits)
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
	w, err := gostmech.Choose(gostmech.Bits(k.keyType), offered, t.info.Label, k.label)
	if err != nil {
		return err
	}
	k.gost = w
	ev := t.log.Debug()
	if w.InSignagent() {
		ev = t.log.Info() // not what a GOST token usually does: say so
	}
	ev.Str("key", k.label).Str("way", w.Describe()).Msg("how the GOST key signs")
	return nil
}
