package signer

import (
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"time"

	"github.com/smallstep/pkcs7"
)

// ErrBadSignature is wrapped by every verification failure.
var ErrBadSignature = errors.New("signature does not verify")

// Verified describes a signature that verified.
type Verified struct {
	// Signer is the certificate of the signer.
	Signer *x509.Certificate
	// SigningTime is the signingTime attribute, zero when there is none.
	SigningTime time.Time
	// SignedAttributes tells whether the signature carries signed attributes.
	SignedAttributes bool
	// Certificates are all the certificates the signature carries.
	Certificates []*x509.Certificate
}

// Verify checks that der is a detached CMS SignedData over content by the
// certificate it carries. When roots is not nil, the signer's certificate
// must also chain to one of them (at the signing time when the signature
// has one, otherwise now).
func Verify(der, content []byte, roots *x509.CertPool) (*Verified, error) {
	p7, err := pkcs7.Parse(der)
	if err != nil {
		return nil, fmt.Errorf("%w: not a CMS SignedData: %w", ErrBadSignature, err)
	}
	if len(p7.Signers) != 1 {
		return nil, fmt.Errorf("%w: %d signers, want exactly one", ErrBadSignature, len(p7.Signers))
	}
	if len(p7.Content) != 0 {
		return nil, fmt.Errorf("%w: the signature is not detached (it carries its content)", ErrBadSignature)
	}
	p7.Content = content
	if err := p7.VerifyWithChain(roots); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	v := &Verified{Signer: p7.GetOnlySigner(), SignedAttributes: len(p7.Signers[0].AuthenticatedAttributes) > 0, Certificates: p7.Certificates}
	if v.Signer == nil {
		return nil, fmt.Errorf("%w: the signer's certificate is not included", ErrBadSignature)
	}
	var st time.Time
	if err := p7.UnmarshalSignedAttribute(asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 5}, &st); err == nil {
		v.SigningTime = st.UTC()
	}
	return v, nil
}
