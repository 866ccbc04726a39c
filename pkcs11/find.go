package pkcs11

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11/gostmech"
	"github.com/signagent/signagent/pkcs11/object"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/safefile"
)

// findKey finds exactly one private key that the selection names and
// reads what is public about it.
func (t *Token) findKey(ctx context.Context, sh p11.SessionHandle) (*Key, error) {
	found, err := t.privateKeys(ctx, sh)
	if err != nil {
		return nil, err
	}
	label, id := t.sel.KeyLabel, t.sel.KeyID
	what := object.DescribeKey(label, id)
	switch {
	case len(found) == 0:
		all, _ := call(ctx, t.mod, func(b Backend) ([]keyInfo, error) { return findKeys(b, sh, "", nil) }, nil)
		return nil, fmt.Errorf("%w: no private key %s on token %q; the token has %s", tokenerr.ErrKeyNotFound, what, t.info.Label, listKeys(all))
	case len(found) > 1 && label == "" && len(id) == 0:
		return nil, fmt.Errorf("%w: token %q has %d private keys and none was chosen: %s; choose one with --key-label or --key-id", tokenerr.ErrKeyAmbiguous, t.info.Label, len(found), listKeys(found))
	case len(found) > 1:
		return nil, fmt.Errorf("%w: %d private keys %s on token %q: %s; choose one with --key-label or --key-id", tokenerr.ErrKeyAmbiguous, len(found), what, t.info.Label, listKeys(found))
	}
	ki := found[0]
	pubFromCert := false
	if ki.pub == nil && gostmech.IsKeyType(ki.keyType) && t.sel.CertFile != "" {
		pub, err := t.publicFromCertificate(ki) // proven by a signature in findCert
		if err != nil {
			return nil, err
		}
		ki.pub, pubFromCert = pub, true
	}
	if ki.pub == nil && gostmech.IsKeyType(ki.keyType) {
		why := ki.why
		if why == nil {
			why = errors.New("it has no public key object with its id beside it")
		}
		return nil, fmt.Errorf("%w: GOST key %q (id %s) on token %q cannot be used: %v; give its certificate with --certificate-file PATH", tokenerr.ErrTokenRefused, ki.label, hex.EncodeToString(ki.id), t.info.Label, why)
	}
	if ki.pub == nil {
		return nil, fmt.Errorf("%w: key %q (id %s) is neither RSA, EC nor GOST R 34.10-2012 with a public key beside it; signagent signs with RSA, ECDSA and GOST keys", tokenerr.ErrTokenRefused, ki.label, hex.EncodeToString(ki.id))
	}
	return &Key{tok: t, handle: ki.h, label: ki.label, id: ki.id, keyType: ki.keyType, pub: ki.pub, pubFromCert: pubFromCert, sign: ki.sign, decrypt: ki.decrypt}, nil
}

func (t *Token) privateKeys(ctx context.Context, sh p11.SessionHandle) ([]keyInfo, error) {
	found, err := call(ctx, t.mod, func(b Backend) ([]keyInfo, error) { return findKeys(b, sh, t.sel.KeyLabel, t.sel.KeyID) }, nil)
	if err != nil {
		return nil, tokenerr.Classify("look for the key", err)
	}
	return found, nil
}

// findCert chooses the key's certificate: --certificate-file when given
// (proven by a signature when the token shows no public key), else the one
// certificate on the token, among those with the key's id or label, whose
// public key is the key's. A valid one beats an expired one; two valid ones
// are an error that lists them.
func (t *Token) findCert(ctx context.Context, sh p11.SessionHandle, k *Key) error {
	if t.sel.CertFile != "" {
		cert, err := readKeyCertificate(t.sel.CertFile)
		if err != nil {
			return err
		}
		if !samePublicKey(gostmech.CertificatePublicKey(cert), k.pub) {
			return fmt.Errorf("%w: certificate %q (thumbprint %s) is for another key than %q (id %s) on token %q", tokenerr.ErrCertMismatch, cert.Subject.String(), canonical.ThumbprintOf(cert), k.label, hex.EncodeToString(k.id), t.info.Label)
		}
		if k.pubFromCert {
			if err := t.provePublic(ctx, sh, k, cert); err != nil {
				return err
			}
		}
		t.setCert(k, cert)
		return nil
	}
	cert, err := call(ctx, t.mod, func(b Backend) (*x509.Certificate, error) {
		return KeyCertificate(b, sh, k.id, k.label, k.pub, t.info.Label)
	}, nil)
	if err != nil {
		return err
	}
	t.setCert(k, cert)
	return nil
}

// FindCertificate looks for the key's certificate as Open does (--cert,
// else the one on the token), for a key opened with NoCertificate: a
// check reports a key without a certificate rather than failing on it.
func (k *Key) FindCertificate(ctx context.Context) (*x509.Certificate, error) {
	if k.cert != nil {
		return k.cert, nil
	}
	sh, err := k.tok.session(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { k.tok.free <- sh }()
	if err := k.tok.findCert(ctx, sh, k); err != nil {
		return nil, err
	}
	return k.cert, nil
}

// KeyCertificate finds the certificate on the token of the key of id,
// label and public half pub (findCerts, chooseCert), with what to do when
// there is none or more than one.
func KeyCertificate(b Backend, sh p11.SessionHandle, id []byte, label string, pub crypto.PublicKey, token string) (*x509.Certificate, error) {
	certs, err := findCerts(b, sh, id, label, pub)
	if err != nil {
		return nil, tokenerr.Classify("look for the certificate", err)
	}
	cert, err := chooseCert(certs, pub, time.Now())
	if errors.Is(err, tokenerr.ErrCertNotFound) {
		return nil, fmt.Errorf("%w: no certificate with id %s or label %q on token %q; store one on the token or give --certificate-file PATH", tokenerr.ErrCertNotFound, hex.EncodeToString(id), label, token)
	}
	if errors.Is(err, tokenerr.ErrCertMismatch) {
		return nil, fmt.Errorf("%w: the certificates with id %s or label %q on token %q are for another key; store the right one or give --certificate-file PATH", tokenerr.ErrCertMismatch, hex.EncodeToString(id), label, token)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (key %q); give --certificate-file PATH to choose", err, label)
	}
	return cert, nil
}

func (t *Token) setCert(k *Key, cert *x509.Certificate) {
	k.cert = cert
	if now := time.Now(); now.After(cert.NotAfter) {
		t.log.Warn().Time("notAfter", cert.NotAfter).Str("key", k.label).Msgf("the certificate expired on %s; the service will likely refuse its signatures", cert.NotAfter.UTC().Format("2006-01-02"))
	} else if now.Before(cert.NotBefore) {
		t.log.Warn().Time("notBefore", cert.NotBefore).Msgf("the certificate is not valid before %s", cert.NotBefore.UTC().Format(time.RFC3339))
	}
}

// chooseCert picks the one certificate for pub among certs (see findCert).
func chooseCert(certs []*x509.Certificate, pub crypto.PublicKey, now time.Time) (*x509.Certificate, error) {
	var valid, invalid []*x509.Certificate
	for _, c := range certs {
		if !samePublicKey(gostmech.CertificatePublicKey(c), pub) {
			continue
		}
		if now.Before(c.NotBefore) || now.After(c.NotAfter) {
			invalid = append(invalid, c)
		} else {
			valid = append(valid, c)
		}
	}
	best := valid
	if len(best) == 0 {
		best = invalid
	}
	switch {
	case len(best) == 1:
		return best[0], nil
	case len(certs) == 0:
		return nil, tokenerr.ErrCertNotFound
	case len(best) == 0:
		return nil, tokenerr.ErrCertMismatch
	}
	names := make([]string, len(best))
	for i, c := range best {
		names[i] = fmt.Sprintf("%s (%q, valid until %s)", canonical.ThumbprintOf(c), c.Subject.CommonName, c.NotAfter.UTC().Format("2006-01-02"))
	}
	state := "valid"
	if len(valid) == 0 {
		state = "expired or not yet valid"
	}
	return nil, fmt.Errorf("%w: %d %s certificates are for the key: %s", tokenerr.ErrCertAmbiguous, len(best), state, strings.Join(names, ", "))
}

// ReadCertificate reads one certificate from a PEM or DER file of at most
// 1 MiB (a certificate is a few KiB).
func ReadCertificate(path string) (*x509.Certificate, error) {
	b, err := safefile.Read(path, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", tokenerr.ErrCertNotFound, err)
	}
	if blk, _ := pem.Decode(b); blk != nil {
		b = blk.Bytes
	}
	c, err := x509.ParseCertificate(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s holds no certificate (PEM or DER): %w", tokenerr.ErrCertNotFound, path, err)
	}
	return c, nil
}

func samePublicKey(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if e, ok := a.(equaler); ok {
		return e.Equal(b)
	}
	return false
}

// KeyShape describes a certificate's key: "RSA" or "EC" (else the
// algorithm's name), its size in bits, and the curve's name for EC.
func KeyShape(c *x509.Certificate) (kind string, bits int, curve string) {
	switch pub := c.PublicKey.(type) {
	case *rsa.PublicKey:
		return "RSA", pub.N.BitLen(), ""
	case *ecdsa.PublicKey:
		return "EC", pub.Curve.Params().BitSize, pub.Curve.Params().Name
	}
	if pub, ok := gostmech.CertificatePublicKey(c).(*gost.PublicKey); ok {
		return "GOST", pub.Curve.Bits, pub.Curve.Name
	}
	return c.PublicKeyAlgorithm.String(), 0, ""
}
