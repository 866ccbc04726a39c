package pkcs11

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11/gostmech"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// A GOST card behind OpenSC (opensc-pkcs11.so with the rutoken_ecp driver,
// gost-card-opensc.md) offers only the raw CKM_GOSTR3410: no hashing
// signature, no Streebog through C_Digest. Its keys are CKK_GOSTR3410 on
// CryptoPro-A, B or C, the same curves and equation as GOST R 34.10-2012
// 256-bit, so Streebog-256 computed here and signed raw on the card is a
// 2012-256 signature like any other. The card gets the 32 hash bytes as the
// hash outputs them (OpenSC reverses them once in sc_pkcs15_compute_signature
// and once more in the driver) and C_Sign returns s then r big-endian (the
// driver reverses the card's little-endian r, s): the PKCS#11 form, which
// goes into the CMS as it is.

// gostSign signs msg in session sh the way w says: one call where the
// token hashes, C_Digest then the raw mechanism, or Streebog here then the
// raw mechanism.
func gostSign(w gostmech.Ways, b Backend, sh p11.SessionHandle, h p11.ObjectHandle, msg []byte) ([]byte, error) {
	switch {
	case w.Hashed != 0:
		return signOn(b, sh, h, w.Hashed, msg)
	case w.InSignagent():
		sum := gost.NewHash(w.Bits)
		sum.Write(msg)
		return signOn(b, sh, h, w.Raw, sum.Sum(nil))
	}
	sum, err := digestOn(b, sh, w.Digest, msg)
	if err != nil {
		return nil, err
	}
	return signOn(b, sh, h, w.Raw, sum)
}

// GOSTWay names how a GOST key signs on its token ("" for other keys).
func (k *Key) GOSTWay() string {
	if !k.IsGOST() {
		return ""
	}
	return k.gost.Describe()
}

// publicFromCertificate stands in for a GOST key's public key object when
// the token shows none (OpenSC may not): the --certificate-file's key, of
// the key's size. The first signature then proves it (provePublic).
func (t *Token) publicFromCertificate(ki keyInfo) (*gost.PublicKey, error) {
	cert, err := readKeyCertificate(t.sel.CertFile)
	if err != nil {
		return nil, err
	}
	pub, ok := gostmech.CertificatePublicKey(cert).(*gost.PublicKey)
	if !ok || pub.Curve.Bits != gostmech.Bits(ki.keyType) {
		return nil, fmt.Errorf("%w: certificate %q (thumbprint %s) in %s is not for a GOST R 34.10-2012 %d-bit key as key %q on token %q is", tokenerr.ErrCertMismatch,
			cert.Subject.CommonName, canonical.ThumbprintOf(cert), t.sel.CertFile, gostmech.Bits(ki.keyType), ki.label, t.info.Label)
	}
	return pub, nil
}

// provePublic signs a random text with the key and verifies it against
// cert, before anything else is signed: the token showed no public key, so
// that the certificate is the key's is known only this way.
func (t *Token) provePublic(ctx context.Context, sh p11.SessionHandle, k *Key, cert *x509.Certificate) error {
	pub, ok := gostmech.CertificatePublicKey(cert).(*gost.PublicKey)
	if !ok {
		return fmt.Errorf("%w: certificate %q is not a GOST R 34.10-2012 certificate", tokenerr.ErrCertMismatch, cert.Subject.CommonName)
	}
	probe := make([]byte, 32)
	if _, err := rand.Read(probe); err != nil {
		return err
	}
	k.mu.Lock()
	h := k.handle
	k.mu.Unlock()
	sig, err := call(ctx, t.mod, func(b Backend) ([]byte, error) { return gostSign(k.gost, b, sh, h, probe) }, nil)
	if err != nil {
		return tokenerr.Classify(fmt.Sprintf("sign with key %q to check its certificate", k.label), err)
	}
	sum := gost.NewHash(pub.Curve.Bits)
	sum.Write(probe)
	if err := gost.Verify(pub, sum.Sum(nil), sig); err != nil {
		return fmt.Errorf("%w: certificate %q (thumbprint %s) is not for key %q on token %q: the key's signature does not verify against it", tokenerr.ErrCertMismatch,
			cert.Subject.CommonName, canonical.ThumbprintOf(cert), k.label, t.info.Label)
	}
	t.log.Debug().Str("key", k.label).Str("thumbprint", canonical.ThumbprintOf(cert)).Msg("the token shows no public key: a signature verified against the certificate")
	return nil
}

// oidGOST2001 is GOST R 34.10-2001's public key algorithm: a certificate
// of it is refused by name (the service takes 2012 ones).
var oidGOST2001 = asn1.ObjectIdentifier{1, 2, 643, 2, 2, 19}

// readKeyCertificate reads --certificate-file for a key: a certificate,
// not a GOST-2001 one, not expired or not yet valid.
func readKeyCertificate(path string) (*x509.Certificate, error) {
	cert, err := ReadCertificate(path)
	if err != nil {
		return nil, err
	}
	var spki struct {
		Algorithm struct{ Algorithm asn1.ObjectIdentifier }
	}
	if _, err := asn1.Unmarshal(cert.RawSubjectPublicKeyInfo, &spki); err == nil && spki.Algorithm.Algorithm.Equal(oidGOST2001) {
		return nil, fmt.Errorf("%w: certificate %q in %s is a GOST R 34.10-2001 certificate; the service takes GOST R 34.10-2012 ones: give a 2012-256 certificate for the same key", tokenerr.ErrCertMismatch, cert.Subject.CommonName, path)
	}
	if now := time.Now(); now.After(cert.NotAfter) {
		return nil, fmt.Errorf("%w: certificate %q (thumbprint %s) in %s expired on %s; give a current one", tokenerr.ErrCertMismatch, cert.Subject.CommonName, canonical.ThumbprintOf(cert), path, cert.NotAfter.UTC().Format("2006-01-02"))
	} else if now.Before(cert.NotBefore) {
		return nil, fmt.Errorf("%w: certificate %q (thumbprint %s) in %s is not valid before %s", tokenerr.ErrCertMismatch, cert.Subject.CommonName, canonical.ThumbprintOf(cert), path, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return cert, nil
}
