package signer

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// ParseCertificates returns every certificate in PEM data, or the one
// certificate in DER data.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := data
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("a PEM certificate does not parse: %w", err)
		}
		out = append(out, c)
	}
	if len(out) > 0 {
		return out, nil
	}
	if c, err := x509.ParseCertificate(data); err == nil {
		return []*x509.Certificate{c}, nil
	}
	return nil, errors.New("no certificate (PEM or DER)")
}
