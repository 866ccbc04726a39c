package pkcs11

import (
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/gost"
)

// TokenInfo describes a token the module sees.
type TokenInfo struct {
	Slot         uint     `json:"slot"`
	Label        string   `json:"label"`
	Serial       string   `json:"serial"`
	Manufacturer string   `json:"manufacturer"`
	Model        string   `json:"model"`
	Flags        []string `json:"flags"`
	Initialized  bool     `json:"initialized"`

	raw p11.TokenInfo // as the module gave it
}

// ListTokens returns the tokens present in the module's slots.
func ListTokens(ctx context.Context, modulePath string) ([]TokenInfo, error) {
	m, release, err := useModule(ctx, modulePath)
	if err != nil {
		return nil, err
	}
	defer release()
	return call(ctx, m, listTokens, nil)
}

// useModule acquires the module at path from this process's registry.
func useModule(ctx context.Context, path string) (*module, func(), error) {
	if _, err := ResolveModule(path, "flag"); err != nil {
		return nil, nil, err
	}
	m, err := defaultRegistry.acquire(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	release := func() { defaultRegistry.release(m) }
	if err := m.ensureInitialized(); err != nil {
		release()
		return nil, nil, err
	}
	return m, release, nil
}

// ProvisioningContext is for provisioning only (devtoken/softhsm, the
// test rigs): it hands out the miekg/pkcs11 context of the module as loaded
// for this process, to create and destroy objects. It bypasses the Backend
// seam: no deadline bounds its calls, no fault is injected into them, and
// no key is marked lost by them. Signing, decrypting and looking at tokens
// go through Open and the Backend. Call the returned function to release
// the module.
func ProvisioningContext(path string) (*p11.Ctx, func(), error) {
	m, release, err := useModule(context.Background(), path)
	if err != nil {
		return nil, nil, err
	}
	lib, ok := m.b.(library)
	if !ok {
		release()
		return nil, nil, fmt.Errorf("%w: %s is not loaded through miekg/pkcs11", ErrNotAModule, path)
	}
	return lib.Ctx, release, nil
}

func listTokens(m Backend) ([]TokenInfo, error) {
	slots, err := m.GetSlotList(true)
	if err != nil {
		return nil, classify("list the module's slots", err)
	}
	var out []TokenInfo
	for _, s := range slots {
		ti, err := m.GetTokenInfo(s)
		if err != nil {
			return nil, classify(fmt.Sprintf("read the token in slot %d", s), err)
		}
		out = append(out, TokenInfo{
			Slot:         s,
			Label:        strings.TrimRight(ti.Label, " \x00"),
			Serial:       strings.TrimRight(ti.SerialNumber, " \x00"),
			Manufacturer: strings.TrimRight(ti.ManufacturerID, " \x00"),
			Model:        strings.TrimRight(ti.Model, " \x00"),
			Flags:        tokenFlags(ti.Flags),
			Initialized:  ti.Flags&p11.CKF_TOKEN_INITIALIZED != 0,
			raw:          ti,
		})
	}
	return out, nil
}

func tokenFlags(f uint) []string {
	var out []string
	for _, x := range []struct {
		bit  uint
		name string
	}{
		{p11.CKF_TOKEN_INITIALIZED, "initialized"},
		{p11.CKF_LOGIN_REQUIRED, "login-required"},
		{p11.CKF_USER_PIN_INITIALIZED, "pin-initialized"},
		{p11.CKF_PROTECTED_AUTHENTICATION_PATH, "pin-pad"},
		{p11.CKF_WRITE_PROTECTED, "write-protected"},
		{p11.CKF_USER_PIN_COUNT_LOW, "pin-count-low"},
		{p11.CKF_USER_PIN_FINAL_TRY, "pin-final-try"},
		{p11.CKF_USER_PIN_LOCKED, "pin-locked"},
		{p11.CKF_HW_SLOT, "hardware"},
	} {
		if f&x.bit != 0 {
			out = append(out, x.name)
		}
	}
	return out
}

// TokenSelector picks one token.
type TokenSelector struct {
	Label  string
	Serial string
	// Slot, when HasSlot, is the slot the token must be in (slot-id= of a
	// pkcs11: URI).
	Slot    uint
	HasSlot bool
}

func (s TokenSelector) String() string {
	if s.HasSlot {
		t := s
		t.HasSlot = false
		if t.Label == "" && t.Serial == "" {
			return fmt.Sprintf("in slot %d", s.Slot)
		}
		return fmt.Sprintf("%s in slot %d", t, s.Slot)
	}
	switch {
	case s.Label != "" && s.Serial != "":
		return fmt.Sprintf("label %q serial %q", s.Label, s.Serial)
	case s.Label != "":
		return fmt.Sprintf("%q", s.Label)
	case s.Serial != "":
		return fmt.Sprintf("with serial %q", s.Serial)
	}
	return "(any)"
}

func (s TokenSelector) matches(t TokenInfo) bool {
	return (s.Label == "" || s.Label == t.Label) && (s.Serial == "" || s.Serial == t.Serial) && (!s.HasSlot || s.Slot == t.Slot)
}

// choose returns the one token sel matches, or the only initialized token
// when sel is empty.
func chooseToken(tokens []TokenInfo, sel TokenSelector) (TokenInfo, error) {
	var found []TokenInfo
	for _, t := range tokens {
		if t.Initialized && sel.matches(t) {
			found = append(found, t)
		}
	}
	names := make([]string, 0, len(tokens))
	for _, t := range tokens {
		if t.Initialized {
			names = append(names, fmt.Sprintf("%q (serial %s, slot %d)", t.Label, t.Serial, t.Slot))
		}
	}
	seen := "the module sees no initialized token"
	if len(names) > 0 {
		seen = "the module sees " + strings.Join(names, ", ")
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0 && (sel.Label != "" || sel.Serial != "" || sel.HasSlot):
		return TokenInfo{}, fmt.Errorf("%w: token %s is not there; %s (`signagent tokens` lists them)", ErrTokenNotFound, sel, seen)
	case len(found) == 0:
		return TokenInfo{}, fmt.Errorf("%w: %s", ErrTokenNotFound, seen)
	}
	return TokenInfo{}, ambiguous(found, sel)
}

// ambiguous says that sel matches every token of found, in which slots,
// and how to choose one. Two cards of one batch may share their label and
// even their serial (every libcacard card has the same): then only the
// slot tells them apart.
func ambiguous(found []TokenInfo, sel TokenSelector) error {
	names := make([]string, 0, len(found))
	labels, serials := map[string]bool{}, map[string]bool{}
	for _, t := range found {
		names = append(names, fmt.Sprintf("%q (serial %s) in slot %d", t.Label, t.Serial, t.Slot))
		labels[t.Label], serials[t.Serial] = true, true
	}
	var flags []string
	if len(labels) == len(found) && sel.Label == "" {
		flags = append(flags, "--token-label")
	}
	if len(serials) == len(found) && sel.Serial == "" {
		flags = append(flags, "--token-serial")
	}
	how := fmt.Sprintf("by its slot with a pkcs11: URI, e.g. --key \"pkcs11:slot-id=%d;token=%s\"", found[0].Slot, uriEscape([]byte(found[0].Label)))
	if len(flags) > 0 {
		how = "with " + strings.Join(flags, " or ") + ", or " + how
	}
	how = "choose one " + how
	what := sel.String()
	if sel == (TokenSelector{}) {
		what = "and none was chosen"
	}
	return fmt.Errorf("%w %s: %s; %s (`signagent tokens` lists them)", ErrTokenAmbiguous, what, strings.Join(names, ", "), how)
}

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
func ListObjects(ctx context.Context, modulePath string, sel TokenSelector, pin string) ([]Object, error) {
	mod, release, err := useModule(ctx, modulePath)
	if err != nil {
		return nil, err
	}
	defer release()
	tokens, err := call(ctx, mod, listTokens, nil)
	if err != nil {
		return nil, err
	}
	tok, err := chooseToken(tokens, sel)
	if err != nil {
		return nil, err
	}
	return call(ctx, mod, func(b Backend) ([]Object, error) { return listObjects(b, tok, pin) }, nil)
}

func listObjects(m Backend, tok TokenInfo, pin string) ([]Object, error) {
	sh, err := m.OpenSession(tok.Slot, p11.CKF_SERIAL_SESSION)
	if err != nil {
		return nil, classify("open a session", err)
	}
	defer m.CloseSession(sh)
	if pin != "" {
		if err := m.Login(sh, p11.CKU_USER, pin); err != nil && !isCode(err, p11.CKR_USER_ALREADY_LOGGED_IN) {
			return nil, classifyLogin(fmt.Sprintf("log in to token %q", tok.Label), err)
		}
		// No logout: closing the session does that when it is the
		// process's last one, and must not when a key of ours is open.
	}
	var out []Object
	for _, class := range []uint{p11.CKO_PRIVATE_KEY, p11.CKO_PUBLIC_KEY, p11.CKO_CERTIFICATE} {
		handles, err := findAll(m, sh, []*p11.Attribute{p11.NewAttribute(p11.CKA_CLASS, class)})
		if err != nil {
			return nil, classify("list objects", err)
		}
		for _, h := range handles {
			o, err := describe(m, sh, h, class)
			if err != nil {
				return nil, classify("read an object's attributes", err)
			}
			o.URI = ObjectURI(tok, o)
			out = append(out, o)
		}
	}
	return out, nil
}

func isCode(err error, code uint) bool {
	c, ok := Code(err)
	return ok && uint(c) == code
}

func attr(b Backend, sh p11.SessionHandle, h p11.ObjectHandle, t uint) []byte {
	return attrs(b, sh, h, t)[t]
}

func boolAttr(b []byte) *bool {
	if len(b) != 1 {
		return nil
	}
	v := b[0] != 0
	return &v
}

func ulong(b []byte) uint {
	var n uint
	for i := len(b) - 1; i >= 0; i-- { // native little-endian CK_ULONG
		n = n<<8 | uint(b[i])
	}
	return n
}

var curveOIDs = map[string]string{
	"1.2.840.10045.3.1.7": "P-256",
	"1.3.132.0.34":        "P-384",
	"1.3.132.0.35":        "P-521",
}

func describe(ctx Backend, sh p11.SessionHandle, h p11.ObjectHandle, class uint) (Object, error) {
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
		switch ulong(attr(ctx, sh, h, p11.CKA_KEY_TYPE)) {
		case p11.CKK_RSA:
			o.KeyType = "RSA"
			o.Bits = len(trimZero(attr(ctx, sh, h, p11.CKA_MODULUS))) * 8
		case p11.CKK_EC:
			o.KeyType = "EC"
			var oid asn1.ObjectIdentifier
			if _, err := asn1.Unmarshal(attr(ctx, sh, h, p11.CKA_EC_PARAMS), &oid); err == nil {
				o.Curve = curveOIDs[oid.String()]
				if o.Curve == "" {
					o.Curve = oid.String()
				}
				o.Bits = curveBits(o.Curve)
			}
		case CKK_GOSTR3410, CKK_GOSTR3410_512:
			o.KeyType = "GOST"
			o.Bits = 256
			if ulong(attr(ctx, sh, h, p11.CKA_KEY_TYPE)) == CKK_GOSTR3410_512 {
				o.Bits = 512
			}
			var oid asn1.ObjectIdentifier
			if _, err := asn1.Unmarshal(attr(ctx, sh, h, CKA_GOSTR3410_PARAMS), &oid); err == nil {
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
			o.KeyType, o.Bits, o.Curve = KeyShape(c)
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

// ObjectURI is the RFC 7512 URI of o on tok: the token by label and
// serial, the object by label and id, and its type, each value
// percent-encoded where RFC 7512 requires (the id always, byte by byte).
func ObjectURI(tok TokenInfo, o Object) string {
	typ := map[string]string{"private-key": "private", "public-key": "public", "certificate": "cert"}[o.Class]
	attrs := []string{"token=" + uriEscape([]byte(tok.Label)), "serial=" + uriEscape([]byte(tok.Serial))}
	if o.Label != "" {
		attrs = append(attrs, "object="+uriEscape([]byte(o.Label)))
	}
	if id, err := hex.DecodeString(o.ID); err == nil && len(id) > 0 {
		var sb strings.Builder
		for _, c := range id {
			fmt.Fprintf(&sb, "%%%02X", c)
		}
		attrs = append(attrs, "id="+sb.String())
	}
	if typ != "" {
		attrs = append(attrs, "type="+typ)
	}
	return "pkcs11:" + strings.Join(attrs, ";")
}

// uriEscape percent-encodes what RFC 7512 does not allow in a path
// attribute's value (anything but unreserved characters and a few
// sub-delimiters).
func uriEscape(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~:[]@!$'()*+,=&", c) >= 0 {
			sb.WriteByte(c)
			continue
		}
		fmt.Fprintf(&sb, "%%%02X", c)
	}
	return sb.String()
}
