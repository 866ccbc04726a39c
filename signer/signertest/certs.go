package signertest

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

// CertOptions shapes a test certificate.
type CertOptions struct {
	CommonName string
	NotBefore  time.Time
	NotAfter   time.Time
	IsCA       bool
	// Parent and ParentKey sign the certificate; nil means self-signed.
	Parent    *x509.Certificate
	ParentKey crypto.Signer
}

// NewCert issues a certificate for key's public half.
func NewCert(t testing.TB, key crypto.Signer, o CertOptions) *x509.Certificate {
	t.Helper()
	c, err := issueCert(key, o)
	if err != nil {
		t.Fatalf("issue certificate: %v", err)
	}
	return c
}

func issueCert(key crypto.Signer, o CertOptions) (*x509.Certificate, error) {
	if o.CommonName == "" {
		o.CommonName = "signagent test"
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(365 * 24 * time.Hour)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: o.CommonName, Organization: []string{"signagent tests"}},
		NotBefore:             o.NotBefore,
		NotAfter:              o.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageContentCommitment,
		BasicConstraintsValid: true,
	}
	if o.IsCA {
		tmpl.IsCA = true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	parent, parentKey := tmpl, key
	if o.Parent != nil {
		parent, parentKey = o.Parent, o.ParentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}
