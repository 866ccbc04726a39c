package signer

import (
	"crypto/sha1"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
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
	if sd := gostSignature(der); sd != nil {
		if roots != nil {
			return nil, fmt.Errorf("%w: a GOST signer's chain is checked against the trusted certificates themselves (VerifyCerts), not a pool", ErrBadSignature)
		}
		return verifyGOST(sd, content, nil, false)
	}
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

// VerifyCerts is Verify with the trusted certificates given as a list (nil
// or empty: the chain is not checked). GOST certificates' chains are
// checked here link by link, which crypto/x509 cannot do.
func VerifyCerts(der, content []byte, cas []*x509.Certificate) (*Verified, error) {
	if len(cas) == 0 {
		return Verify(der, content, nil)
	}
	if sd := gostSignature(der); sd != nil {
		return verifyGOST(sd, content, cas, true)
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	return Verify(der, content, pool)
}

// Report prints what Verify found, for a person: the signer, its SHA-1
// thumbprint, the signing time, and whether the chain was checked.
func (v *Verified) Report(w io.Writer, chainChecked bool) error {
	sum := sha1.Sum(v.Signer.Raw)
	fmt.Fprintf(w, "signature OK\nsigner: %s\nthumbprint: %s\n", v.Signer.Subject, strings.ToUpper(hex.EncodeToString(sum[:])))
	if !v.SigningTime.IsZero() {
		fmt.Fprintf(w, "signing time: %s UTC\n", v.SigningTime.UTC().Format("02.01.2006 15:04:05"))
	} else {
		fmt.Fprintln(w, "signed attributes: none")
	}
	chain := "not checked (give --ca to check it)"
	if chainChecked {
		chain = "trusted"
	}
	_, err := fmt.Fprintf(w, "certificate chain: %s\n", chain)
	return err
}
