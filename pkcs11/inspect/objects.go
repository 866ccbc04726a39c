package inspect

import (
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"time"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostmech"
	"github.com/signagent/signagent/pkcs11/object"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
	"github.com/signagent/signagent/pkcs11/uri"
)

// Object describes a key or certificate on a token.
type Object struct {
	Class      string    `json:"class"` // private-key, public-key, certificate
	Label      string    `json:"label"`
	ID         string    `json:"id"` // hex
	KeyType    string    `json:"keyType,omitempty"`
	Bits       int       `json:"bits,omitempty"`
	Curve      string    `json:"curve,omitempty"`
	Subject    string    `json:"subject,omitempty"`
	Issuer     string    `json:"issuer,omitempty"`
	NotAfter   time.Time `json:"notAfter,omitzero"`
	Thumbprint string    `json:"thumbprint,omitempty"` // SHA-1 of the certificate, upper-case hex
	// For private keys: whether the token keeps the key secret (sensitive)
	// and whether it would ever let it out (extractable).
	Sensitive   *bool `json:"sensitive,omitempty"`
	Extractable *bool `json:"extractable,omitempty"`
	// URI is the object's RFC 7512 pkcs11: URI (token, serial, object,
	// id, type): what --key takes.
	URI string `json:"uri"`
}

// ListObjects returns the keys and certificates on the token. Private keys are
// listed only when pin is given (they are private objects).
func ListObjects(ctx context.Context, modulePath string, sel tokeninfo.TokenSelector, pin string) ([]Object, error) {
	var out []Object
	err := pkcs11.WithModule(ctx, modulePath, func(b pkcs11.Backend) error {
		tokens, err := tokeninfo.ReadTokens(b)
		if err != nil {
			return err
		}
		tok, err := tokeninfo.ChooseToken(tokens, sel)
		if err != nil {
			return err
		}
		out, err = listObjects(b, tok, pin)
		return err
	})
	return out, err
}

func listObjects(m pkcs11.Backend, tok tokeninfo.TokenInfo, pin string) ([]Object, error) {
	sh, err := m.OpenSession(tok.Slot, p11.CKF_SERIAL_SESSION)
	if err != nil {
		return nil, tokenerr.Classify("open a session", err)
	}
	defer m.CloseSession(sh)
	if pin != "" {
		if err := m.Login(sh, p11.CKU_USER, pin); err != nil && !alreadyLoggedIn(err) {
			return nil, tokenerr.ClassifyLogin(fmt.Sprintf("log in to token %q", tok.Label), err)
		}
		// No logout: closing the session does that when it is the
		// process's last one, and must not when a key of ours is open.
	}
	var out []Object
	for _, class := range []uint{p11.CKO_PRIVATE_KEY, p11.CKO_PUBLIC_KEY, p11.CKO_CERTIFICATE} {
		handles, err := object.FindObjects(m, sh, []*p11.Attribute{p11.NewAttribute(p11.CKA_CLASS, class)})
		if err != nil {
			return nil, tokenerr.Classify("list objects", err)
		}
		for _, h := range handles {
			o, err := describe(m, sh, h, class)
			if err != nil {
				return nil, tokenerr.Classify("read an object's attributes", err)
			}
			o.URI = objectURI(tok, o)
			out = append(out, o)
		}
	}
	return out, nil
}

func describe(ctx pkcs11.Backend, sh p11.SessionHandle, h p11.ObjectHandle, class uint) (Object, error) {
	o := Object{
		Label: string(attr(ctx, sh, h, p11.CKA_LABEL)),
		ID:    hex.EncodeToString(attr(ctx, sh, h, p11.CKA_ID)),
	}
	switch class {
	case p11.CKO_PRIVATE_KEY, p11.CKO_PUBLIC_KEY:
		o.Class = map[uint]string{p11.CKO_PRIVATE_KEY: "private-key", p11.CKO_PUBLIC_KEY: "public-key"}[class]
		if class == p11.CKO_PRIVATE_KEY {
			o.Sensitive = boolAttr(attr(ctx, sh, h, p11.CKA_SENSITIVE))
			o.Extractable = boolAttr(attr(ctx, sh, h, p11.CKA_EXTRACTABLE))
		}
		switch object.ULong(attr(ctx, sh, h, p11.CKA_KEY_TYPE)) {
		case p11.CKK_RSA:
			o.KeyType = "RSA"
			o.Bits = len(trimZero(attr(ctx, sh, h, p11.CKA_MODULUS))) * 8
		case p11.CKK_EC:
			o.KeyType = "EC"
			var oid asn1.ObjectIdentifier
			if _, err := asn1.Unmarshal(attr(ctx, sh, h, p11.CKA_EC_PARAMS), &oid); err == nil {
				o.Curve = object.CurveNames[oid.String()]
				if o.Curve == "" {
					o.Curve = oid.String()
				}
				o.Bits = curveBits(o.Curve)
			}
		case gostmech.CKK_GOSTR3410, gostmech.CKK_GOSTR3410_512:
			o.KeyType = "GOST"
			o.Bits = 256
			if object.ULong(attr(ctx, sh, h, p11.CKA_KEY_TYPE)) == gostmech.CKK_GOSTR3410_512 {
				o.Bits = 512
			}
			var oid asn1.ObjectIdentifier
			if _, err := asn1.Unmarshal(attr(ctx, sh, h, gostmech.CKA_GOSTR3410_PARAMS), &oid); err == nil {
				o.Curve = oid.String()
				if c := gost.CurveByOID(oid); c != nil {
					o.Curve = c.Name
				}
			}
		default:
			o.KeyType = "other"
		}
	case p11.CKO_CERTIFICATE:
		o.Class = "certificate"
		der := attr(ctx, sh, h, p11.CKA_VALUE)
		if c, err := x509.ParseCertificate(der); err == nil {
			o.Subject = c.Subject.String()
			o.Issuer = c.Issuer.String()
			o.NotAfter = c.NotAfter.UTC()
			o.Thumbprint = canonical.ThumbprintOf(c)
			o.KeyType, o.Bits, o.Curve = pkcs11.KeyShape(c)
		}
	}
	return o, nil
}

func curveBits(name string) int {
	switch name {
	case "P-256":
		return elliptic.P256().Params().BitSize
	case "P-384":
		return elliptic.P384().Params().BitSize
	case "P-521":
		return elliptic.P521().Params().BitSize
	}
	return 0
}

func trimZero(b []byte) []byte {
	for len(b) > 0 && b[0] == 0 {
		b = b[1:]
	}
	return b
}

func attr(b pkcs11.Backend, sh p11.SessionHandle, h p11.ObjectHandle, t uint) []byte {
	return object.Attributes(b, sh, h, t)[t]
}

func boolAttr(b []byte) *bool {
	if len(b) != 1 {
		return nil
	}
	v := b[0] != 0
	return &v
}

// uri is o's RFC 7512 URI on tok: what --key takes.
func objectURI(tok tokeninfo.TokenInfo, o Object) string {
	typ := map[string]string{"private-key": "private", "public-key": "public", "certificate": "cert"}[o.Class]
	id, _ := hex.DecodeString(o.ID)
	return uri.Object(tok.Label, tok.Serial, typ, o.Label, id)
}

func alreadyLoggedIn(err error) bool {
	code, ok := tokenerr.Code(err)
	return ok && code == p11.CKR_USER_ALREADY_LOGGED_IN
}
