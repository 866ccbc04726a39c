package pkcs11

import (
	"context"
	"crypto"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

// Sign signs digest on the token within the selection's timeout. ECDSA
// keys are signed with raw CKM_ECDSA over the digest computed here (SoftHSM
// and many cards offer no hashing ECDSA mechanism); RSA keys with
// CKM_RSA_PKCS over the DigestInfo.
func (k *Key) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), k.tok.timeout)
	defer cancel()
	return k.SignContext(ctx, digest, opts)
}

// SignContext is Sign bounded by ctx rather than the selection's timeout.
func (k *Key) SignContext(ctx context.Context, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	if !k.sign {
		return nil, fmt.Errorf("%w: key %q may not sign (CKA_SIGN is false)", tokenerr.ErrKeyUsage, k.label)
	}
	if k.IsGOST() {
		return k.signGOSTDigest(ctx, digest)
	}
	mech, data, err := k.signInput(digest, opts)
	if err != nil {
		return nil, err
	}
	sig, err := k.do(ctx, "sign with key "+fmt.Sprintf("%q", k.label), func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		if err := b.SignInit(sh, mech, h); err != nil {
			return nil, err
		}
		return b.Sign(sh, data)
	})
	if err != nil {
		return nil, err
	}
	if k.keyType == p11.CKK_EC {
		return ecdsaDER(sig)
	}
	return sig, nil
}

// Decrypt decrypts an RSA-encrypted message on the token: PKCS#1 v1.5 by
// default or with *rsa.PKCS1v15DecryptOptions, OAEP with *rsa.OAEPOptions.
func (k *Key) Decrypt(_ io.Reader, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), k.tok.timeout)
	defer cancel()
	return k.DecryptContext(ctx, msg, opts)
}

// CanDecrypt says, without asking the token anything, why the key cannot
// decrypt (not RSA, CKA_DECRYPT false), or nil.
func (k *Key) CanDecrypt() error {
	if k.keyType != p11.CKK_RSA {
		return fmt.Errorf("%w: key %q is not an RSA key; only RSA keys decrypt here", tokenerr.ErrKeyUsage, k.label)
	}
	if !k.decrypt {
		return fmt.Errorf("%w: key %q may not decrypt (CKA_DECRYPT is false); use a key made for encryption, or one with both uses", tokenerr.ErrKeyUsage, k.label)
	}
	return nil
}

// DecryptContext is Decrypt bounded by ctx.
func (k *Key) DecryptContext(ctx context.Context, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	if err := k.CanDecrypt(); err != nil {
		return nil, err
	}
	mech := []*p11.Mechanism{p11.NewMechanism(p11.CKM_RSA_PKCS, nil)}
	if o, ok := opts.(*rsa.OAEPOptions); ok {
		hash, mgf, err := oaepParams(o.Hash)
		if err != nil {
			return nil, err
		}
		// CKZ_DATA_SPECIFIED is the only source PKCS#11 defines, label or not.
		mech = []*p11.Mechanism{p11.NewMechanism(p11.CKM_RSA_PKCS_OAEP, p11.NewOAEPParams(hash, mgf, p11.CKZ_DATA_SPECIFIED, o.Label))}
	}
	return k.do(ctx, fmt.Sprintf("decrypt with key %q", k.label), func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		if err := b.DecryptInit(sh, mech, h); err != nil {
			return nil, err
		}
		out, err := b.Decrypt(sh, msg)
		if code, ok := tokenerr.Code(err); ok && isBadCiphertext(code) {
			// The message's fault, not the device's: the key stays in use.
			// Otherwise whoever chooses the message (a certificate login's
			// challenge) could take the token out of service, and see it.
			return nil, errBadCiphertext
		}
		return out, err
	})
}

// do runs op with a session of the token and the key's handle. A handle
// the token no longer knows is looked up once more (the token may have
// been reset); the token sorts out the rest (Token.settle): a key that is
// gone, a session or device that broke, or a call that did not return
// marks the token lost, so that its owner reconnects.
func (k *Key) do(ctx context.Context, what string, op func(Backend, p11.SessionHandle, p11.ObjectHandle) ([]byte, error)) ([]byte, error) {
	t := k.tok
	started := time.Now().UnixNano()
	if err := t.usable(what); err != nil {
		return nil, err
	}
	sh, err := t.session(ctx)
	if err != nil {
		if errors.Is(err, tokenerr.ErrTokenTimeout) && t.answered.Load() > started {
			// The token went on answering this process's other sessions
			// while this one waited to be opened (a card does one thing
			// at a time, and its driver opens a session only between
			// them): the queue's wait, as when every session is in use,
			// and not a token gone.
			return nil, fmt.Errorf("could not %s: could not open another session with token %q in time, while it was answering the others: %w", what, t.info.Label, context.DeadlineExceeded)
		}
		if tokenerr.Recoverable(err) { // the token would not open a session
			return nil, t.markLost(err)
		}
		return nil, err
	}
	k.mu.Lock()
	h := k.handle
	k.mu.Unlock()
	out, err := t.run(ctx, sh, func(b Backend) ([]byte, error) { return op(b, sh, h) })
	if code, ok := tokenerr.Code(err); ok && (code == p11.CKR_OBJECT_HANDLE_INVALID || code == p11.CKR_KEY_HANDLE_INVALID) {
		t.log.Warn().Str("key", k.label).Msg("the token no longer knows the key's handle; looking the key up again")
		var fresh p11.ObjectHandle
		if fresh, err = k.relookup(ctx, sh); err == nil {
			out, err = t.run(ctx, sh, func(b Backend) ([]byte, error) { return op(b, sh, fresh) })
		}
	}
	return t.settle(ctx, sh, started, what, out, err)
}

// relookup finds the key again after its handle went stale; it must be the
// same key (same public half).
func (k *Key) relookup(ctx context.Context, sh p11.SessionHandle) (p11.ObjectHandle, error) {
	found, err := call(ctx, k.tok.mod, func(b Backend) ([]keyInfo, error) { return findKeys(b, sh, k.label, k.id) }, nil)
	if err != nil {
		return 0, err
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("%w: key %q (id %s) is no longer on token %q", tokenerr.ErrTokenLost, k.label, hex.EncodeToString(k.id), k.tok.info.Label)
	}
	if !samePublicKey(k.pub, found[0].pub) && !(k.pubFromCert && found[0].pub == nil) {
		return 0, fmt.Errorf("%w: the key %q found again is not the one the certificate is for", tokenerr.ErrCertMismatch, k.label)
	}
	k.mu.Lock()
	k.handle = found[0].h
	k.mu.Unlock()
	return found[0].h, nil
}

// WithContext returns a crypto.Signer whose Sign is bounded by ctx.
func (k *Key) WithContext(ctx context.Context) crypto.Signer { return ctxSigner{k, ctx} }

type ctxSigner struct {
	k   *Key
	ctx context.Context
}

func (c ctxSigner) Public() crypto.PublicKey { return c.k.Public() }

func (c ctxSigner) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.k.tok.timeout)
	defer cancel()
	return c.k.SignContext(ctx, digest, opts)
}

// SignMessage signs msg hashing on the token (GOST keys), bounded by ctx.
func (c ctxSigner) SignMessage(_ io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.k.tok.timeout)
	defer cancel()
	return c.k.SignMessageContext(ctx, msg, opts)
}

// Digest hashes msg on the token (GOST keys), bounded by ctx.
func (c ctxSigner) Digest(msg []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.k.tok.timeout)
	defer cancel()
	return c.k.DigestContext(ctx, msg)
}

// signInput returns the mechanism and the bytes to give C_Sign.
func (k *Key) signInput(digest []byte, opts crypto.SignerOpts) ([]*p11.Mechanism, []byte, error) {
	switch k.keyType {
	case p11.CKK_EC:
		return []*p11.Mechanism{p11.NewMechanism(p11.CKM_ECDSA, nil)}, digest, nil
	case p11.CKK_RSA:
		if _, ok := opts.(*rsa.PSSOptions); ok {
			return nil, nil, fmt.Errorf("%w: RSA-PSS signatures are not offered; signagent signs PKCS#1 v1.5", tokenerr.ErrKeyUsage)
		}
		prefix, ok := digestInfoPrefix[opts.HashFunc()]
		if !ok {
			return nil, nil, fmt.Errorf("%w: no DigestInfo for hash %v", tokenerr.ErrKeyUsage, opts.HashFunc())
		}
		if len(digest) != opts.HashFunc().Size() {
			return nil, nil, fmt.Errorf("%w: the digest is %d bytes, %v wants %d", tokenerr.ErrKeyUsage, len(digest), opts.HashFunc(), opts.HashFunc().Size())
		}
		return []*p11.Mechanism{p11.NewMechanism(p11.CKM_RSA_PKCS, nil)}, append(append([]byte{}, prefix...), digest...), nil
	}
	return nil, nil, fmt.Errorf("%w: unsupported key type", tokenerr.ErrKeyUsage)
}

// digestInfoPrefix is the DER of DigestInfo up to the digest (RFC 8017 9.2).
var digestInfoPrefix = map[crypto.Hash][]byte{
	crypto.SHA256: {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20},
	crypto.SHA384: {0x30, 0x41, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02, 0x05, 0x00, 0x04, 0x30},
	crypto.SHA512: {0x30, 0x51, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03, 0x05, 0x00, 0x04, 0x40},
}

func oaepParams(h crypto.Hash) (hash, mgf uint, err error) {
	switch h {
	case crypto.SHA1, 0:
		return p11.CKM_SHA_1, p11.CKG_MGF1_SHA1, nil
	case crypto.SHA256:
		return p11.CKM_SHA256, p11.CKG_MGF1_SHA256, nil
	case crypto.SHA384:
		return p11.CKM_SHA384, p11.CKG_MGF1_SHA384, nil
	case crypto.SHA512:
		return p11.CKM_SHA512, p11.CKG_MGF1_SHA512, nil
	}
	return 0, 0, fmt.Errorf("%w: OAEP with %v is not offered", tokenerr.ErrKeyUsage, h)
}

// ecdsaDER turns the token's r||s into the ASN.1 form Go and CMS use.
func ecdsaDER(raw []byte) ([]byte, error) {
	if len(raw) == 0 || len(raw)%2 != 0 {
		return nil, fmt.Errorf("%w: the token returned a malformed ECDSA signature", tokenerr.ErrTokenRefused)
	}
	r := new(big.Int).SetBytes(raw[:len(raw)/2])
	s := new(big.Int).SetBytes(raw[len(raw)/2:])
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1BigInt(r)
		b.AddASN1BigInt(s)
	})
	return b.Bytes()
}

// errBadCiphertext is a decryption the token refused for the message's
// sake. It carries no return value, so that it is not taken for a device
// failure.
var errBadCiphertext = errors.New("the token could not decrypt the message (bad padding or length)")

// isBadCiphertext reports whether C_Decrypt's return value may mean a
// message the key cannot decrypt. SoftHSM answers bad PKCS#1 v1.5 or OAEP
// padding with CKR_GENERAL_ERROR, not CKR_ENCRYPTED_DATA_INVALID; the
// operation and the session end cleanly either way.
func isBadCiphertext(code p11.Error) bool {
	switch code {
	case p11.CKR_ENCRYPTED_DATA_INVALID, p11.CKR_ENCRYPTED_DATA_LEN_RANGE, p11.CKR_DATA_INVALID, p11.CKR_DATA_LEN_RANGE, p11.CKR_GENERAL_ERROR:
		return true
	}
	return false
}
