// Package signer makes and checks detached CMS (PKCS#7) SignedData over the
// trusted-authentication text. It signs through any crypto.Signer and knows
// nothing of PKCS#11: the token layer hands it a signer whose private key
// never leaves the device.
//
// SignedData is encoded here rather than with smallstep/pkcs7 because that
// library stamps signingTime with time.Now(), and the service expects the
// signing time to be the very second written in the signed text. Parsing and
// verification use smallstep/pkcs7.
package signer

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/gost"
	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// Options controls the shape of the signature.
type Options struct {
	// Hash is the digest algorithm: crypto.SHA256 (the default), SHA384 or SHA512.
	Hash crypto.Hash
	// NoSignedAttributes signs the content digest directly with no signed
	// attributes, the style of certified GOST providers. By default the
	// signature carries contentType, messageDigest and signingTime, as OpenSSL
	// `cms -sign` and .NET SignedCms do.
	NoSignedAttributes bool
	// SigningTime is written in the signingTime attribute. It should be the
	// timestamp of the signed text; zero means now.
	SigningTime time.Time
	// Chain holds intermediate certificates to include after the signer's.
	Chain []*x509.Certificate
}

// ErrUnsupported is returned for key types and hashes the signer cannot use.
var ErrUnsupported = errdefs.New(errdefs.ErrInvalidInput, "unsupported")

var (
	oidData          = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}
	oidSignedData    = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}
	oidContentType   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 3}
	oidMessageDigest = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 4}
	oidSigningTime   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 5}
	oidRSA           = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	oidSHA256        = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}
	oidSHA384        = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 2}
	oidSHA512        = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 3}
	oidECDSASHA256   = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}
	oidECDSASHA384   = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 3}
	oidECDSASHA512   = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 4}
)

func digestOID(h crypto.Hash) (asn1.ObjectIdentifier, error) {
	switch h {
	case crypto.SHA256:
		return oidSHA256, nil
	case crypto.SHA384:
		return oidSHA384, nil
	case crypto.SHA512:
		return oidSHA512, nil
	}
	return nil, fmt.Errorf("%w: hash %v (use SHA-256, SHA-384 or SHA-512)", ErrUnsupported, h)
}

// signatureAlgorithm returns the SignerInfo signatureAlgorithm and whether it
// takes NULL parameters (rsaEncryption does; ecdsa-with-SHA* do not).
func signatureAlgorithm(pub crypto.PublicKey, h crypto.Hash) (asn1.ObjectIdentifier, bool, error) {
	switch pub.(type) {
	case *rsa.PublicKey:
		return oidRSA, true, nil
	case *ecdsa.PublicKey:
		switch h {
		case crypto.SHA256:
			return oidECDSASHA256, false, nil
		case crypto.SHA384:
			return oidECDSASHA384, false, nil
		case crypto.SHA512:
			return oidECDSASHA512, false, nil
		}
	case ed25519.PublicKey:
		return nil, false, fmt.Errorf("%w: Ed25519 keys (the service accepts RSA or a certified provider's keys)", ErrUnsupported)
	}
	return nil, false, fmt.Errorf("%w: key type %T", ErrUnsupported, pub)
}

// HashFromName maps "sha256", "sha384" and "sha512" to a crypto.Hash.
func HashFromName(name string) (crypto.Hash, error) {
	switch name {
	case "", "sha256", "SHA256", "sha-256", "SHA-256":
		return crypto.SHA256, nil
	case "sha384", "SHA384", "sha-384", "SHA-384":
		return crypto.SHA384, nil
	case "sha512", "SHA512", "sha-512", "SHA-512":
		return crypto.SHA512, nil
	}
	return 0, fmt.Errorf("%w: hash %q (use sha256, sha384 or sha512)", ErrUnsupported, name)
}

// Sign returns the DER of a detached CMS SignedData over content, signed by
// key, whose certificate is cert. The certificate is included.
func Sign(content []byte, key crypto.Signer, cert *x509.Certificate, opts Options) ([]byte, error) {
	if cert == nil {
		return nil, errors.New("no signer certificate")
	}
	if pub, ok := key.Public().(*gost.PublicKey); ok {
		return signGOST(content, key, pub, cert, opts)
	}
	h := opts.Hash
	if h == 0 {
		h = crypto.SHA256
	}
	dOID, err := digestOID(h)
	if err != nil {
		return nil, err
	}
	sigOID, sigNull, err := signatureAlgorithm(key.Public(), h)
	if err != nil {
		return nil, err
	}
	hasher := h.New()
	hasher.Write(content)
	contentDigest := hasher.Sum(nil)

	var signedAttrs []byte // contents of the SET OF Attribute, DER-sorted
	toSign := contentDigest
	if !opts.NoSignedAttributes {
		var der []byte
		if signedAttrs, der, err = signedAttributes(contentDigest, opts.SigningTime); err != nil {
			return nil, err
		}
		hasher = h.New()
		hasher.Write(der)
		toSign = hasher.Sum(nil)
	}
	sig, err := key.Sign(rand.Reader, toSign, h)
	if err != nil {
		return nil, signError(err)
	}
	return assemble(cert, opts.Chain, algorithm{dOID, false}, signedAttrs, algorithm{sigOID, sigNull}, sig)
}

func signError(err error) error {
	// A token key's error already says what it was attempting.
	if strings.HasPrefix(err.Error(), "could not ") {
		return err
	}
	return fmt.Errorf("could not sign: %w", err)
}

// algorithm is an AlgorithmIdentifier: its OID and whether it carries NULL
// parameters.
type algorithm struct {
	oid  asn1.ObjectIdentifier
	null bool
}

// assemble writes the ContentInfo of a detached SignedData with one
// SignerInfo.
func assemble(cert *x509.Certificate, chain []*x509.Certificate, digest algorithm, signedAttrs []byte, sigAlg algorithm, sig []byte) ([]byte, error) {
	b := cryptobyte.NewBuilder(nil)
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // ContentInfo
		b.AddASN1ObjectIdentifier(oidSignedData)
		b.AddASN1(cbasn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) {
			b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // SignedData
				b.AddASN1Int64(1)
				b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) {
					addAlgorithm(b, digest.oid, digest.null)
				})
				b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // detached: no eContent
					b.AddASN1ObjectIdentifier(oidData)
				})
				b.AddASN1(cbasn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) {
					b.AddBytes(cert.Raw)
					for _, c := range chain {
						b.AddBytes(c.Raw)
					}
				})
				b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) {
					b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // SignerInfo
						b.AddASN1Int64(1)
						b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) { // IssuerAndSerialNumber
							b.AddBytes(cert.RawIssuer)
							b.AddASN1BigInt(cert.SerialNumber)
						})
						addAlgorithm(b, digest.oid, digest.null)
						if signedAttrs != nil {
							b.AddASN1(cbasn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) {
								b.AddBytes(signedAttrs)
							})
						}
						addAlgorithm(b, sigAlg.oid, sigAlg.null)
						b.AddASN1OctetString(sig)
					})
				})
			})
		})
	})
	return b.Bytes()
}

func addAlgorithm(b *cryptobyte.Builder, oid asn1.ObjectIdentifier, null bool) {
	b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1ObjectIdentifier(oid)
		if null {
			b.AddASN1NULL()
		}
	})
}

// signedAttributes returns the signed attributes for digest at when (zero:
// now), as SignerInfo holds them, and as the signature covers them: an
// explicit SET OF (tag 0x31), not the [0] IMPLICIT form.
func signedAttributes(digest []byte, when time.Time) (attrs, toSign []byte, err error) {
	if when.IsZero() {
		when = time.Now()
	}
	if attrs, err = encodeSignedAttributes(digest, when); err != nil {
		return nil, nil, err
	}
	toSign, err = setOf(attrs)
	return attrs, toSign, err
}

// setOf wraps the contents of a SET OF in its tag.
func setOf(contents []byte) ([]byte, error) {
	b := cryptobyte.NewBuilder(nil)
	b.AddASN1(cbasn1.SET, func(b *cryptobyte.Builder) { b.AddBytes(contents) })
	return b.Bytes()
}

// encodeSignedAttributes returns the DER of contentType, messageDigest and
// signingTime, sorted as DER requires for a SET OF.
func encodeSignedAttributes(digest []byte, when time.Time) ([]byte, error) {
	attr := func(oid asn1.ObjectIdentifier, value func(*cryptobyte.Builder)) ([]byte, error) {
		b := cryptobyte.NewBuilder(nil)
		b.AddASN1(cbasn1.SEQUENCE, func(b *cryptobyte.Builder) {
			b.AddASN1ObjectIdentifier(oid)
			b.AddASN1(cbasn1.SET, value)
		})
		return b.Bytes()
	}
	when = when.UTC().Truncate(time.Second)
	var all [][]byte
	for _, a := range []struct {
		oid   asn1.ObjectIdentifier
		value func(*cryptobyte.Builder)
	}{
		{oidContentType, func(b *cryptobyte.Builder) { b.AddASN1ObjectIdentifier(oidData) }},
		{oidMessageDigest, func(b *cryptobyte.Builder) { b.AddASN1OctetString(digest) }},
		{oidSigningTime, func(b *cryptobyte.Builder) {
			// RFC 5652 11.3: UTCTime for 1950-2049, GeneralizedTime otherwise.
			if when.Year() >= 1950 && when.Year() < 2050 {
				b.AddASN1UTCTime(when)
			} else {
				b.AddASN1GeneralizedTime(when)
			}
		}},
	} {
		der, err := attr(a.oid, a.value)
		if err != nil {
			return nil, err
		}
		all = append(all, der)
	}
	sort.Slice(all, func(i, j int) bool { return lessDER(all[i], all[j]) })
	var out []byte
	for _, a := range all {
		out = append(out, a...)
	}
	return out, nil
}

// lessDER orders encodings as X.690 11.6 orders the members of a SET OF: as
// octet strings, the shorter padded at its end with zero octets.
func lessDER(a, b []byte) bool {
	n := max(len(a), len(b))
	for i := 0; i < n; i++ {
		var x, y byte
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// CMS signs texts with one key and certificate; it is what the trusted
// client and the agent hold.
type CMS struct {
	Key     crypto.Signer
	Cert    *x509.Certificate
	Options Options
}

// contextSigner is a signer whose operations can be bounded by a context,
// as pkcs11.Key is.
type contextSigner interface {
	WithContext(context.Context) crypto.Signer
}

// SignText signs text, stamping signingTime with ts (the text's timestamp).
// When the key supports it, the token operation is bounded by ctx.
func (s *CMS) SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error) {
	key := s.Key
	if cs, ok := key.(contextSigner); ok {
		key = cs.WithContext(ctx)
	}
	opts := s.Options
	opts.SigningTime = ts
	return Sign(text, key, s.Cert, opts)
}

// TextSigner signs a text with its timestamp (a *CMS).
type TextSigner interface {
	SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error)
}

// Bounded bounds each signature by Timeout: a token that hangs fails the
// signature rather than the caller.
type Bounded struct {
	Signer  TextSigner
	Timeout time.Duration
}

// SignText signs within Timeout.
func (b Bounded) SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, b.Timeout)
	defer cancel()
	return b.Signer.SignText(ctx, text, ts)
}
