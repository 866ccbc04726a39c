package signer

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"

	"github.com/signagent/signagent/internal/gost"
)

// TokenHasher is a GOST key on a token: it hashes there (Streebog) and
// signs what it hashed, so that no hash of signagent's own stands between
// the text and the signature. pkcs11.Key is one.
type TokenHasher interface {
	crypto.Signer
	// SignMessage hashes msg with the key's Streebog and signs the hash,
	// returning s then r (the value CMS carries).
	SignMessage(rand io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error)
	// Digest returns the key's Streebog of msg; an error wrapping
	// errors.ErrUnsupported when the token has no digest mechanism.
	Digest(msg []byte) ([]byte, error)
}

// signGOST makes the certified provider's form of a GOST R 34.10-2012
// signature (gost.md): the Streebog of the key's size as digest algorithm
// (no parameters), GOST R 34.10-2012 with that Streebog as signature
// algorithm, the value s then r as the token gives it; with contentType,
// messageDigest and signingTime unless NoSignedAttributes. The hash follows
// the key: opts.Hash may only be the default (SHA-256, or unset).
func signGOST(content []byte, key crypto.Signer, pub *gost.PublicKey, cert *x509.Certificate, opts Options) ([]byte, error) {
	if opts.Hash != 0 && opts.Hash != crypto.SHA256 {
		return nil, fmt.Errorf("%w: hash %v does not apply to a GOST key: it signs with Streebog-%d, bound to the key", ErrUnsupported, opts.Hash, pub.Curve.Bits)
	}
	th, ok := key.(TokenHasher)
	if !ok {
		return nil, fmt.Errorf("%w: a GOST key must hash and sign on its token (got %T)", ErrUnsupported, key)
	}
	bits := pub.Curve.Bits
	var signedAttrs []byte
	toSign := content
	if !opts.NoSignedAttributes {
		md, err := th.Digest(content)
		if errors.Is(err, errors.ErrUnsupported) {
			// No Streebog on the token: the message digest is public data,
			// computed here; the signature still hashes on the token.
			h := gost.NewHash(bits)
			h.Write(content)
			md, err = h.Sum(nil), nil
		}
		if err != nil {
			return nil, signError(err)
		}
		if signedAttrs, toSign, err = signedAttributes(md, opts.SigningTime); err != nil {
			return nil, err
		}
	}
	sig, err := th.SignMessage(rand.Reader, toSign, nil)
	if err != nil {
		return nil, signError(err)
	}
	if len(sig) != bits/4 {
		return nil, fmt.Errorf("could not sign: the key returned a %d-byte GOST signature, want %d", len(sig), bits/4)
	}
	return assemble(cert, opts.Chain, algorithm{gost.DigestOID(bits), false}, signedAttrs, algorithm{gost.SignatureOID(bits), false}, sig)
}
