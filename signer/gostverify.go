package signer

import (
	"bytes"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/signagent/signagent/internal/gost"
	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// gostSignedData is what verification needs of a SignedData with one
// SignerInfo.
type gostSignedData struct {
	rawCerts    []byte   // the certificates' DER, one after the other
	issuer      []byte   // the SignerInfo's issuer (DER Name), or nil
	serial      *big.Int // and serial number
	ski         []byte   // or its subjectKeyIdentifier
	digestOID   asn1.ObjectIdentifier
	sigOID      asn1.ObjectIdentifier
	signedAttrs []byte // the [0] IMPLICIT contents, nil when absent
	sig         []byte
	detached    bool
}

// gostSignature is der's SignedData when its one SignerInfo names a
// Streebog digest (such a signature is verified here, not by pkcs7), nil
// otherwise. Its certificates are parsed only when it is.
func gostSignature(der []byte) *gostSignedData {
	sd, err := parseSignedData(der)
	if err != nil || gost.DigestBits(sd.digestOID) == 0 {
		return nil
	}
	return sd
}

func parseSignedData(der []byte) (*gostSignedData, error) {
	in := cryptobyte.String(der)
	var ci, content, sd cryptobyte.String
	var ctype asn1.ObjectIdentifier
	if !in.ReadASN1(&ci, cbasn1.SEQUENCE) || !ci.ReadASN1ObjectIdentifier(&ctype) || !ctype.Equal(oidSignedData) ||
		!ci.ReadASN1(&content, cbasn1.Tag(0).Constructed().ContextSpecific()) || !content.ReadASN1(&sd, cbasn1.SEQUENCE) {
		return nil, errors.New("not a CMS SignedData")
	}
	var version int64
	var digestAlgs, encap, infos cryptobyte.String
	if !sd.ReadASN1Integer(&version) || !sd.ReadASN1(&digestAlgs, cbasn1.SET) || !sd.ReadASN1(&encap, cbasn1.SEQUENCE) {
		return nil, errors.New("the SignedData does not parse")
	}
	out := &gostSignedData{}
	var eType asn1.ObjectIdentifier
	if !encap.ReadASN1ObjectIdentifier(&eType) {
		return nil, errors.New("the encapsulated content info does not parse")
	}
	out.detached = encap.Empty()
	var certs cryptobyte.String
	var hasCerts bool
	if !sd.ReadOptionalASN1(&certs, &hasCerts, cbasn1.Tag(0).Constructed().ContextSpecific()) {
		return nil, errors.New("the certificates do not parse")
	}
	out.rawCerts = certs
	var skip cryptobyte.String
	var hasCRLs bool
	if !sd.ReadOptionalASN1(&skip, &hasCRLs, cbasn1.Tag(1).Constructed().ContextSpecific()) || !sd.ReadASN1(&infos, cbasn1.SET) {
		return nil, errors.New("the signer infos do not parse")
	}
	var si cryptobyte.String
	if !infos.ReadASN1(&si, cbasn1.SEQUENCE) {
		return nil, errors.New("no signer info")
	}
	if !infos.Empty() {
		return nil, errors.New("more than one signer, want exactly one")
	}
	var siVersion int64
	if !si.ReadASN1Integer(&siVersion) {
		return nil, errors.New("the signer info does not parse")
	}
	if si.PeekASN1Tag(cbasn1.SEQUENCE) {
		var ias cryptobyte.String
		var issuer cryptobyte.String
		out.serial = new(big.Int)
		if !si.ReadASN1(&ias, cbasn1.SEQUENCE) || !ias.ReadASN1Element(&issuer, cbasn1.SEQUENCE) || !ias.ReadASN1Integer(out.serial) {
			return nil, errors.New("the signer's issuer and serial number do not parse")
		}
		out.issuer = issuer
	} else {
		var ski cryptobyte.String
		if !si.ReadASN1(&ski, cbasn1.Tag(0).ContextSpecific()) {
			return nil, errors.New("the signer identifier does not parse")
		}
		out.ski = ski
	}
	readAlg := func(oid *asn1.ObjectIdentifier) bool {
		var alg cryptobyte.String
		return si.ReadASN1(&alg, cbasn1.SEQUENCE) && alg.ReadASN1ObjectIdentifier(oid)
	}
	if !readAlg(&out.digestOID) {
		return nil, errors.New("the digest algorithm does not parse")
	}
	var attrs cryptobyte.String
	var hasAttrs bool
	if !si.ReadOptionalASN1(&attrs, &hasAttrs, cbasn1.Tag(0).Constructed().ContextSpecific()) {
		return nil, errors.New("the signed attributes do not parse")
	}
	if hasAttrs {
		out.signedAttrs = attrs
		if out.signedAttrs == nil {
			out.signedAttrs = []byte{}
		}
	}
	var sig cryptobyte.String
	if !readAlg(&out.sigOID) || !si.ReadASN1(&sig, cbasn1.OCTET_STRING) {
		return nil, errors.New("the signature does not parse")
	}
	out.sig = sig
	return out, nil
}

// verifyGOST checks a GOST R 34.10-2012 detached signature (gost.md): the
// writer may name the signature algorithm by the signature-with-digest or
// by the public key OID, with or without NULL parameters; the digest must
// be the key's Streebog.
func verifyGOST(sd *gostSignedData, content []byte, cas []*x509.Certificate, checkChain bool) (*Verified, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadSignature, fmt.Sprintf(format, a...))
	}
	certs, err := x509.ParseCertificates(sd.rawCerts)
	if err != nil {
		return nil, bad("a certificate does not parse: %v", err)
	}
	if !sd.detached {
		return nil, bad("the signature is not detached (it carries its content)")
	}
	var signerCert *x509.Certificate
	for _, c := range certs {
		if (sd.issuer != nil && bytes.Equal(c.RawIssuer, sd.issuer) && c.SerialNumber.Cmp(sd.serial) == 0) ||
			(sd.ski != nil && bytes.Equal(c.SubjectKeyId, sd.ski)) {
			signerCert = c
		}
	}
	if signerCert == nil {
		return nil, bad("the signer's certificate is not included")
	}
	pub, err := gost.PublicKeyOf(signerCert)
	if err != nil {
		return nil, bad("the signer's certificate: %v", err)
	}
	bits := pub.Curve.Bits
	if gost.DigestBits(sd.digestOID) != bits {
		return nil, bad("digest algorithm %s does not go with a GOST %d-bit key (Streebog-%d does)", sd.digestOID, bits, bits)
	}
	keyOID := gost.OIDPublicKey256
	if bits == 512 {
		keyOID = gost.OIDPublicKey512
	}
	if !sd.sigOID.Equal(gost.SignatureOID(bits)) && !sd.sigOID.Equal(keyOID) {
		return nil, bad("signature algorithm %s is not GOST R 34.10-2012 with a %d-bit key", sd.sigOID, bits)
	}
	h := gost.NewHash(bits)
	h.Write(content)
	contentDigest := h.Sum(nil)
	v := &Verified{Signer: signerCert, Certificates: certs}
	signed := contentDigest
	if sd.signedAttrs != nil {
		v.SignedAttributes = true
		md, when, err := readSignedAttributes(sd.signedAttrs)
		if err != nil {
			return nil, bad("%v", err)
		}
		if !bytes.Equal(md, contentDigest) {
			return nil, bad("the message digest does not match the content")
		}
		v.SigningTime = when
		set, err := setOf(sd.signedAttrs)
		if err != nil {
			return nil, bad("%v", err)
		}
		h.Reset()
		h.Write(set)
		signed = h.Sum(nil)
	}
	if err := gost.Verify(pub, signed, sd.sig); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	if checkChain {
		at := v.SigningTime
		if at.IsZero() {
			at = time.Now()
		}
		if err := gostChain(signerCert, certs, cas, at); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadSignature, err)
		}
	}
	return v, nil
}

// readSignedAttributes checks contentType (id-data) and returns the
// messageDigest and the signingTime (zero when absent).
func readSignedAttributes(attrs []byte) (md []byte, when time.Time, err error) {
	in := cryptobyte.String(attrs)
	var haveType bool
	for !in.Empty() {
		var a, values cryptobyte.String
		var oid asn1.ObjectIdentifier
		if !in.ReadASN1(&a, cbasn1.SEQUENCE) || !a.ReadASN1ObjectIdentifier(&oid) || !a.ReadASN1(&values, cbasn1.SET) {
			return nil, when, errors.New("a signed attribute does not parse")
		}
		switch {
		case oid.Equal(oidContentType):
			var ct asn1.ObjectIdentifier
			if !values.ReadASN1ObjectIdentifier(&ct) || !ct.Equal(oidData) {
				return nil, when, errors.New("the content type is not id-data")
			}
			haveType = true
		case oid.Equal(oidMessageDigest):
			var d cryptobyte.String
			if !values.ReadASN1(&d, cbasn1.OCTET_STRING) {
				return nil, when, errors.New("the message digest does not parse")
			}
			md = d
		case oid.Equal(oidSigningTime):
			var t time.Time
			ok := false
			if values.PeekASN1Tag(cbasn1.UTCTime) {
				ok = values.ReadASN1UTCTime(&t)
			} else {
				ok = values.ReadASN1GeneralizedTime(&t)
			}
			if !ok {
				return nil, when, errors.New("the signing time does not parse")
			}
			when = t.UTC()
		}
	}
	if !haveType || md == nil {
		return nil, when, errors.New("signed attributes without contentType or messageDigest (RFC 5652 5.3)")
	}
	return md, when, nil
}

// gostChain checks that c chains, through the carried certificates, to one
// of cas, each link signed with GOST R 34.10-2012 and valid at at.
func gostChain(c *x509.Certificate, carried, cas []*x509.Certificate, at time.Time) error {
	for depth := 0; depth < 8; depth++ {
		if at.Before(c.NotBefore) || at.After(c.NotAfter) {
			return fmt.Errorf("certificate %q is not valid at %s", c.Subject, at.UTC().Format(time.RFC3339))
		}
		for _, ca := range cas {
			if bytes.Equal(ca.Raw, c.Raw) {
				return nil // the trusted certificate itself
			}
			if bytes.Equal(ca.RawSubject, c.RawIssuer) && gost.CheckCertificateSignature(c, ca) == nil {
				return nil
			}
		}
		var next *x509.Certificate
		for _, p := range carried {
			if !bytes.Equal(p.Raw, c.Raw) && bytes.Equal(p.RawSubject, c.RawIssuer) && gost.CheckCertificateSignature(c, p) == nil {
				next = p
				break
			}
		}
		if next == nil {
			return fmt.Errorf("certificate %q does not chain to a trusted certificate", c.Subject)
		}
		c = next
	}
	return errors.New("the certificate chain is too long")
}
