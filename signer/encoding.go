package signer

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Formats a signature can be written in.
var Formats = []string{"der", "pem", "base64"}

// Encode writes a DER signature as der, pem (type CMS) or base64 (with a
// newline).
func Encode(der []byte, format string) ([]byte, error) {
	switch format {
	case "der":
		return der, nil
	case "pem":
		return pem.EncodeToMemory(&pem.Block{Type: "CMS", Bytes: der}), nil
	case "base64":
		return []byte(base64.StdEncoding.EncodeToString(der) + "\n"), nil
	}
	return nil, fmt.Errorf("format %q: want der, pem or base64", format)
}

// Decode accepts a signature as DER, PEM (CMS or PKCS7) or base64.
func Decode(b []byte) ([]byte, error) {
	if len(b) > 0 && b[0] == 0x30 {
		return b, nil
	}
	if blk, _ := pem.Decode(b); blk != nil {
		return blk.Bytes, nil
	}
	der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(b)), ""))
	if err != nil {
		return nil, errors.New("the signature is neither DER, PEM nor base64")
	}
	return der, nil
}

// ErrOutsideValidity is returned by CheckValidity.
var ErrOutsideValidity = errors.New("outside the certificate's validity")

// CheckValidity says whether t lies within the certificate's validity; a
// signature dated outside it is refused by a verifier that checks.
func CheckValidity(c *x509.Certificate, t time.Time) error {
	if c == nil || (!t.Before(c.NotBefore) && !t.After(c.NotAfter)) {
		return nil
	}
	return fmt.Errorf("the signing time %s is %w (%s to %s)", t.UTC().Format(time.RFC3339), ErrOutsideValidity,
		c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
}
