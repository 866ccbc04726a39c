package envelope

import (
	"bytes"
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"math/big"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

var (
	oidEnvelopedData = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 3}
	oidData          = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}
)

// Recipient is one key-transport recipient of an envelope.
type Recipient struct {
	Algorithm asn1.ObjectIdentifier
	// Issuer (DER) and Serial, or SubjectKeyID, name the certificate.
	Issuer       []byte
	Serial       *big.Int
	SubjectKeyID []byte

	params       []byte // the key-transport algorithm's parameters (DER), nil when absent
	encryptedKey []byte
}

// For says whether the recipient names cert.
func (r Recipient) For(cert *x509.Certificate) bool {
	if r.SubjectKeyID != nil {
		return len(cert.SubjectKeyId) > 0 && bytes.Equal(r.SubjectKeyID, cert.SubjectKeyId)
	}
	return r.Serial != nil && r.Serial.Cmp(cert.SerialNumber) == 0 && bytes.Equal(r.Issuer, cert.RawIssuer)
}

// parsed is an EnvelopedData as read, before any judgement on its shape.
type parsed struct {
	version int64
	// others counts the recipients that are not key transport (key
	// agreement, KEK, password, other); extras says whether originatorInfo
	// or unprotectedAttrs are present.
	recipients []Recipient
	others     int
	extras     bool

	contentType asn1.ObjectIdentifier
	contentAlg  asn1.ObjectIdentifier
	contentIV   []byte // the content algorithm's parameters (DER), nil when absent
	ciphertext  []byte
	hasContent  bool
}

var (
	tagContent0   = cbasn1.Tag(0).ContextSpecific()
	tagExplicit0  = cbasn1.Tag(0).Constructed().ContextSpecific()
	tagOriginator = cbasn1.Tag(0).Constructed().ContextSpecific()
	tagAttrs      = cbasn1.Tag(1).Constructed().ContextSpecific()
)

// parse reads a DER ContentInfo holding an EnvelopedData (RFC 5652
// section 6.1). Only the encoding is checked here; Open judges the shape.
func parse(der []byte) (*parsed, error) {
	malformed := func(what string) error { return fmt.Errorf("%w: %s", ErrMalformed, what) }
	s := cryptobyte.String(der)
	var ci, content, ed cryptobyte.String
	var ctype asn1.ObjectIdentifier
	if !s.ReadASN1(&ci, cbasn1.SEQUENCE) || !s.Empty() {
		return nil, malformed("not one DER SEQUENCE")
	}
	if !ci.ReadASN1ObjectIdentifier(&ctype) || !ci.ReadASN1(&content, tagExplicit0) || !ci.Empty() {
		return nil, malformed("not a ContentInfo")
	}
	if !ctype.Equal(oidEnvelopedData) {
		return nil, malformed(fmt.Sprintf("the content type is %v", ctype))
	}
	var p parsed
	if !content.ReadASN1(&ed, cbasn1.SEQUENCE) || !content.Empty() || !ed.ReadASN1Int64WithTag(&p.version, cbasn1.INTEGER) {
		return nil, malformed("not an EnvelopedData")
	}
	if ed.PeekASN1Tag(tagOriginator) {
		p.extras = true
		if !ed.SkipASN1(tagOriginator) {
			return nil, malformed("originatorInfo")
		}
	}
	var set cryptobyte.String
	if !ed.ReadASN1(&set, cbasn1.SET) {
		return nil, malformed("no recipientInfos")
	}
	for !set.Empty() {
		var ri cryptobyte.String
		var tag cbasn1.Tag
		if !set.ReadAnyASN1(&ri, &tag) {
			return nil, malformed("a recipient")
		}
		if tag != cbasn1.SEQUENCE {
			p.others++ // key agreement, KEK, password or other recipients: not ours
			continue
		}
		r, err := parseKeyTrans(ri)
		if err != nil {
			return nil, malformed(err.Error())
		}
		p.recipients = append(p.recipients, r)
	}
	if err := p.parseContent(&ed); err != nil {
		return nil, malformed(err.Error())
	}
	if ed.PeekASN1Tag(tagAttrs) {
		p.extras = true
		if !ed.SkipASN1(tagAttrs) {
			return nil, malformed("unprotectedAttrs")
		}
	}
	if !ed.Empty() {
		return nil, malformed("bytes after the encrypted content")
	}
	return &p, nil
}

// parseKeyTrans reads a KeyTransRecipientInfo's contents.
func parseKeyTrans(ri cryptobyte.String) (Recipient, error) {
	var r Recipient
	var version int64
	if !ri.ReadASN1Int64WithTag(&version, cbasn1.INTEGER) {
		return r, fmt.Errorf("a recipient's version")
	}
	switch {
	case ri.PeekASN1Tag(cbasn1.SEQUENCE):
		var ias, issuer cryptobyte.String
		r.Serial = new(big.Int)
		if !ri.ReadASN1(&ias, cbasn1.SEQUENCE) || !ias.ReadASN1Element(&issuer, cbasn1.SEQUENCE) ||
			!ias.ReadASN1Integer(r.Serial) || !ias.Empty() {
			return r, fmt.Errorf("a recipient's issuer and serial")
		}
		r.Issuer = issuer
	case ri.PeekASN1Tag(tagContent0):
		var ski cryptobyte.String
		if !ri.ReadASN1(&ski, tagContent0) {
			return r, fmt.Errorf("a recipient's subject key identifier")
		}
		r.SubjectKeyID = append([]byte{}, ski...)
	default:
		return r, fmt.Errorf("a recipient names its certificate neither by issuer and serial nor by key identifier")
	}
	alg, params, err := readAlgorithm(&ri)
	if err != nil {
		return r, fmt.Errorf("a recipient's key-transport algorithm: %v", err)
	}
	r.Algorithm, r.params = alg, params
	var key []byte
	if !ri.ReadASN1Bytes(&key, cbasn1.OCTET_STRING) || !ri.Empty() {
		return r, fmt.Errorf("a recipient's encrypted key")
	}
	r.encryptedKey = key
	return r, nil
}

// parseContent reads the EncryptedContentInfo; the content may be one
// primitive [0] or, as BER allows, a constructed [0] of OCTET STRINGs.
func (p *parsed) parseContent(ed *cryptobyte.String) error {
	var eci cryptobyte.String
	if !ed.ReadASN1(&eci, cbasn1.SEQUENCE) || !eci.ReadASN1ObjectIdentifier(&p.contentType) {
		return fmt.Errorf("no encryptedContentInfo")
	}
	alg, params, err := readAlgorithm(&eci)
	if err != nil {
		return fmt.Errorf("the content-encryption algorithm: %v", err)
	}
	p.contentAlg, p.contentIV = alg, params
	var c cryptobyte.String
	switch {
	case eci.PeekASN1Tag(tagContent0):
		if !eci.ReadASN1(&c, tagContent0) {
			return fmt.Errorf("the encrypted content")
		}
		p.ciphertext, p.hasContent = append([]byte{}, c...), true
	case eci.PeekASN1Tag(tagExplicit0):
		if !eci.ReadASN1(&c, tagExplicit0) {
			return fmt.Errorf("the encrypted content")
		}
		for !c.Empty() {
			var chunk []byte
			if !c.ReadASN1Bytes(&chunk, cbasn1.OCTET_STRING) {
				return fmt.Errorf("a piece of the encrypted content")
			}
			p.ciphertext = append(p.ciphertext, chunk...)
		}
		p.hasContent = true
	}
	if !eci.Empty() {
		return fmt.Errorf("bytes after the encrypted content")
	}
	return nil
}

// readAlgorithm reads an AlgorithmIdentifier: its OID and its parameters
// (DER, nil when absent).
func readAlgorithm(s *cryptobyte.String) (asn1.ObjectIdentifier, []byte, error) {
	var ai cryptobyte.String
	var oid asn1.ObjectIdentifier
	if !s.ReadASN1(&ai, cbasn1.SEQUENCE) || !ai.ReadASN1ObjectIdentifier(&oid) {
		return nil, nil, fmt.Errorf("not an AlgorithmIdentifier")
	}
	if ai.Empty() {
		return oid, nil, nil
	}
	var params cryptobyte.String
	var tag cbasn1.Tag
	if !ai.ReadAnyASN1Element(&params, &tag) || !ai.Empty() {
		return nil, nil, fmt.Errorf("%v: bytes after its parameters", oid)
	}
	return oid, params, nil
}

// Recipients reads the key-transport recipients of a DER EnvelopedData.
func Recipients(der []byte) ([]Recipient, error) {
	p, err := parse(der)
	if err != nil {
		return nil, err
	}
	return p.recipients, nil
}
