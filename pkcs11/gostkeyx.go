package pkcs11

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/internal/gost"
)

// A GOST certificate login opens the service's challenge (RFC 4490 key
// transport: VKO GOST R 34.10-2012, the CryptoPro key wrap with the KEK
// diversified as RFC 4357 section 6.5 says, GOST 28147-89 CFB) on the
// token, in one of two ways, chosen from the token's mechanisms:
//
//   - one step: C_UnwrapKey with CKM_GOSTR3410_KEY_WRAP on the private key
//     over the whole GostR3410-KeyTransport (PKCS#11's RFC 4490 mechanism);
//   - derive and unwrap: C_DeriveKey with CKM_GOSTR3410_12_DERIVE (VKO) on
//     the private key, the KEK diversified (a second C_DeriveKey with
//     CKM_KDF_4357, or the first one's kdf CKD_KDF_4357), C_UnwrapKey with
//     CKM_GOST28147_KEY_WRAP (the token checks the MAC).
//
// Either way the content is decrypted with CKM_GOST28147 under the
// unwrapped key, and every key made on the way is a session object
// destroyed before the call returns. Where a real card diversifies is not
// settled (docs/tokens.md): `signagent token check` tries each way the
// token offers on a challenge sealed to the token's own certificate.
const (
	CKM_GOSTR3410_12_DERIVE    = 0xD4321007                 // TC26's (vendor base 0xD4321000)
	CKM_GOSTR3410_KEY_WRAP     = p11.CKM_GOSTR3410_KEY_WRAP // 0x1203
	CKM_GOST28147              = p11.CKM_GOST28147          // 0x1222
	CKM_GOST28147_KEY_WRAP     = p11.CKM_GOST28147_KEY_WRAP // 0x1224
	CKM_KDF_4357               = 0xD4321025
	CKD_KDF_4357               = 0xD4321025 // the kdf of CK_GOSTR3410_DERIVE_PARAMS: VKO, then RFC 4357 6.5
	CKD_KDF_GOSTR3411_2012_256 = 0xD4321026 // VKO_GOSTR3410_2012_256: Streebog-256 of the point
)

// GOSTLoginWay is how a GOST key opens a challenge on its token.
type GOSTLoginWay int

const (
	// GOSTOneStep: CKM_GOSTR3410_KEY_WRAP.
	GOSTOneStep GOSTLoginWay = iota + 1
	// GOSTDeriveKDF4357: VKO (CKD_KDF_GOSTR3411_2012_256), then CKM_KDF_4357.
	GOSTDeriveKDF4357
	// GOSTDeriveDiversified: VKO with the kdf CKD_KDF_4357 in one derive.
	GOSTDeriveDiversified
)

// GOSTLoginWays are the ways, in the order a key prefers them.
var GOSTLoginWays = []GOSTLoginWay{GOSTOneStep, GOSTDeriveKDF4357, GOSTDeriveDiversified}

func (w GOSTLoginWay) String() string {
	switch w {
	case GOSTOneStep:
		return "one step: C_UnwrapKey with CKM_GOSTR3410_KEY_WRAP"
	case GOSTDeriveKDF4357:
		return "derive and unwrap: CKM_GOSTR3410_12_DERIVE (kdf CKD_KDF_GOSTR3411_2012_256), diversified by CKM_KDF_4357, CKM_GOST28147_KEY_WRAP"
	case GOSTDeriveDiversified:
		return "derive and unwrap: CKM_GOSTR3410_12_DERIVE with kdf CKD_KDF_4357 (diversified in the derive), CKM_GOST28147_KEY_WRAP"
	}
	return "none"
}

// Short names the way in a word, for logs and reports.
func (w GOSTLoginWay) Short() string {
	switch w {
	case GOSTOneStep:
		return "one-step"
	case GOSTDeriveKDF4357:
		return "derive+CKM_KDF_4357"
	case GOSTDeriveDiversified:
		return "derive(CKD_KDF_4357)"
	}
	return "none"
}

// MechanismUse is a mechanism and the CKF_ flag a use of it needs.
type MechanismUse struct{ Code, Flag uint }

// Needs lists the mechanisms the way uses and the flag each needs.
func (w GOSTLoginWay) Needs() []MechanismUse {
	decrypt := MechanismUse{CKM_GOST28147, p11.CKF_DECRYPT}
	unwrap := MechanismUse{CKM_GOST28147_KEY_WRAP, p11.CKF_UNWRAP}
	derive := MechanismUse{CKM_GOSTR3410_12_DERIVE, p11.CKF_DERIVE}
	switch w {
	case GOSTOneStep:
		return []MechanismUse{{CKM_GOSTR3410_KEY_WRAP, p11.CKF_UNWRAP}, decrypt}
	case GOSTDeriveKDF4357:
		return []MechanismUse{derive, {CKM_KDF_4357, p11.CKF_DERIVE}, unwrap, decrypt}
	}
	return []MechanismUse{derive, unwrap, decrypt}
}

// loginMechanismNames names the mechanisms of the ways (Needs).
var loginMechanismNames = map[uint]string{
	CKM_GOSTR3410_12_DERIVE: "CKM_GOSTR3410_12_DERIVE", CKM_GOSTR3410_KEY_WRAP: "CKM_GOSTR3410_KEY_WRAP",
	CKM_GOST28147: "CKM_GOST28147", CKM_GOST28147_KEY_WRAP: "CKM_GOST28147_KEY_WRAP", CKM_KDF_4357: "CKM_KDF_4357",
}

// GOSTLoginOffered lists the ways the token's mechanisms (code -> flags)
// and the key's attributes allow, in order of preference, or an error that
// names what is missing.
func GOSTLoginOffered(flags map[uint]uint, derive, unwrap bool, token, key string) ([]GOSTLoginWay, error) {
	var ways []GOSTLoginWay
	var missing []string
	for _, w := range GOSTLoginWays {
		ok := true
		for _, n := range w.Needs() {
			f, has := flags[n.Code]
			if !has || f&n.Flag == 0 {
				ok = false
				missing = append(missing, loginMechanismNames[n.Code])
			}
		}
		if ok {
			ways = append(ways, w)
		}
	}
	var why []string
	if ways != nil && ways[0] == GOSTOneStep && !unwrap {
		ways = ways[1:]
		why = append(why, fmt.Sprintf("key %q may not unwrap (CKA_UNWRAP is false)", key))
	}
	if len(ways) > 0 && ways[0] != GOSTOneStep && !derive {
		ways = nil
		why = append(why, fmt.Sprintf("key %q may not derive (CKA_DERIVE is false)", key))
	}
	if len(ways) == 0 {
		if len(why) == 0 {
			why = append(why, "it offers neither way (missing "+strings.Join(uniq(missing), ", ")+")")
		}
		return nil, fmt.Errorf("%w: token %q cannot open a GOST certificate login's challenge with key %q: %s", ErrKeyUsage, token, key, strings.Join(why, "; "))
	}
	return ways, nil
}

func uniq(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// gostLogin probes the token once (its mechanisms' flags, the key's
// CKA_DERIVE and CKA_UNWRAP) and caches the ways.
func (k *Key) gostLogin(ctx context.Context) ([]GOSTLoginWay, error) {
	k.mu.Lock()
	ways, err, done := k.gostLoginWays, k.gostLoginErr, k.gostLoginProbed
	k.mu.Unlock()
	if done {
		return ways, err
	}
	if !k.IsGOST() {
		return nil, fmt.Errorf("%w: key %q is not a GOST key", ErrKeyUsage, k.label)
	}
	flags := map[uint]uint{}
	var derive, unwrap bool
	_, err = k.do(ctx, fmt.Sprintf("read what key %q may do", k.label), func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		list, err := b.GetMechanismList(k.tok.info.Slot)
		if err != nil {
			return nil, err
		}
		for _, m := range list {
			switch m.Mechanism {
			case CKM_GOSTR3410_12_DERIVE, CKM_KDF_4357, CKM_GOSTR3410_KEY_WRAP, CKM_GOST28147_KEY_WRAP, CKM_GOST28147:
				info, err := b.GetMechanismInfo(k.tok.info.Slot, []*p11.Mechanism{p11.NewMechanism(m.Mechanism, nil)})
				if err != nil {
					return nil, err
				}
				flags[m.Mechanism] = info.Flags
			}
		}
		attrs, err := b.GetAttributeValue(sh, h, []*p11.Attribute{p11.NewAttribute(p11.CKA_DERIVE, nil), p11.NewAttribute(p11.CKA_UNWRAP, nil)})
		if err != nil {
			return nil, err
		}
		for _, a := range attrs {
			v := len(a.Value) == 1 && a.Value[0] != 0
			switch a.Type {
			case p11.CKA_DERIVE:
				derive = v
			case p11.CKA_UNWRAP:
				unwrap = v
			}
		}
		return nil, nil
	})
	if err != nil {
		return nil, err // not cached: the token may answer next time
	}
	ways, err = GOSTLoginOffered(flags, derive, unwrap, k.tok.info.Label, k.label)
	k.mu.Lock()
	k.gostLoginWays, k.gostLoginErr, k.gostLoginProbed = ways, err, true
	k.mu.Unlock()
	if err == nil {
		k.tok.log.Debug().Str("key", k.label).Str("way", ways[0].Short()).Msg("GOST key opens certificate-login challenges on the token")
	}
	return ways, err
}

// CanOpenGOST says, after asking the token what it offers (once), why the
// key cannot open a GOST certificate login's challenge, or nil.
func (k *Key) CanOpenGOST() error {
	ctx, cancel := context.WithTimeout(context.Background(), k.tok.timeout)
	defer cancel()
	return k.CanOpenGOSTContext(ctx)
}

// CanOpenGOSTContext is CanOpenGOST bounded by ctx.
func (k *Key) CanOpenGOSTContext(ctx context.Context) error {
	_, err := k.gostLogin(ctx)
	return err
}

// GOSTLoginWays returns the ways the token offers, preferred first.
func (k *Key) GOSTLoginWays(ctx context.Context) ([]GOSTLoginWay, error) { return k.gostLogin(ctx) }

// OpenGOST opens a GOST key transport and its content on the token, the
// preferred way, and returns the content.
func (k *Key) OpenGOST(t *gost.Transport) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), k.tok.timeout)
	defer cancel()
	return k.OpenGOSTContext(ctx, t)
}

// OpenGOSTContext is OpenGOST bounded by ctx.
func (k *Key) OpenGOSTContext(ctx context.Context, t *gost.Transport) ([]byte, error) {
	ways, err := k.gostLogin(ctx)
	if err != nil {
		return nil, err
	}
	return k.OpenGOSTWay(ctx, ways[0], t)
}

// errGOSTRefused is a challenge the token would not open for the
// message's sake (the MAC, a parameter, the length): the key stays in use,
// so that whoever chooses the challenge cannot take the token out of
// service.
var errGOSTRefused = errors.New("the token could not open the GOST key transport (the MAC or a parameter)")

// OpenGOSTWay opens t on the token the way w, whether or not the token
// lists it (token check tries each).
func (k *Key) OpenGOSTWay(ctx context.Context, w GOSTLoginWay, t *gost.Transport) ([]byte, error) {
	if t.Bits != gostBits(k.keyType) || !k.IsGOST() {
		return nil, fmt.Errorf("%w: key %q is not a GOST %d-bit key", ErrKeyUsage, k.label, t.Bits)
	}
	return k.do(ctx, fmt.Sprintf("open the challenge with key %q", k.label), func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		out, err := openGOSTOn(b, sh, h, w, t)
		if code, ok := Code(err); ok && isBadGOSTMessage(code) {
			return nil, errGOSTRefused
		}
		return out, err
	})
}

// openGOSTOn runs the way w's calls in session sh with the private key h.
func openGOSTOn(b Backend, sh p11.SessionHandle, h p11.ObjectHandle, w GOSTLoginWay, t *gost.Transport) (out []byte, err error) {
	var made []p11.ObjectHandle
	defer func() {
		// Every session key made here is destroyed, whatever happened; a
		// failure to destroy one is reported only when nothing else was.
		for i := len(made) - 1; i >= 0; i-- {
			if derr := b.DestroyObject(sh, made[i]); derr != nil && err == nil {
				clear(out)
				out, err = nil, derr
			}
		}
	}()
	var params cParams
	defer params.free()
	secret := func(set []byte, use uint) []*p11.Attribute {
		return []*p11.Attribute{
			p11.NewAttribute(p11.CKA_CLASS, p11.CKO_SECRET_KEY),
			p11.NewAttribute(p11.CKA_KEY_TYPE, p11.CKK_GOST28147),
			p11.NewAttribute(p11.CKA_TOKEN, false),
			p11.NewAttribute(p11.CKA_SENSITIVE, true),
			p11.NewAttribute(p11.CKA_EXTRACTABLE, false),
			p11.NewAttribute(use, true),
			p11.NewAttribute(p11.CKA_GOST28147_PARAMS, set),
		}
	}
	keep := func(o p11.ObjectHandle, err error) (p11.ObjectHandle, error) {
		if err == nil {
			made = append(made, o)
		}
		return o, err
	}
	var cek p11.ObjectHandle
	switch w {
	case GOSTOneStep:
		m := p11.NewMechanism(CKM_GOSTR3410_KEY_WRAP, params.gostKeyWrapParams(t.UKM, uint(h)))
		if cek, err = keep(b.UnwrapKey(sh, []*p11.Mechanism{m}, h, t.KeyTransport, secret(t.ContentParamSet, p11.CKA_DECRYPT))); err != nil {
			return nil, err
		}
	case GOSTDeriveKDF4357, GOSTDeriveDiversified:
		kdf := uint(CKD_KDF_GOSTR3411_2012_256)
		if w == GOSTDeriveDiversified {
			kdf = CKD_KDF_4357
		}
		m := p11.NewMechanism(CKM_GOSTR3410_12_DERIVE, params.gostDeriveParams(kdf, t.Ephemeral, t.UKM))
		tmpl := append(secret(t.WrapParamSet, p11.CKA_UNWRAP), p11.NewAttribute(p11.CKA_DERIVE, true))
		kek, err := keep(b.DeriveKey(sh, []*p11.Mechanism{m}, h, tmpl))
		if err != nil {
			return nil, err
		}
		if w == GOSTDeriveKDF4357 {
			m := p11.NewMechanism(CKM_KDF_4357, append([]byte{}, t.UKM...))
			if kek, err = keep(b.DeriveKey(sh, []*p11.Mechanism{m}, kek, secret(t.WrapParamSet, p11.CKA_UNWRAP))); err != nil {
				return nil, err
			}
		}
		m = p11.NewMechanism(CKM_GOST28147_KEY_WRAP, append([]byte{}, t.UKM...))
		if cek, err = keep(b.UnwrapKey(sh, []*p11.Mechanism{m}, kek, t.WrappedKey, secret(t.ContentParamSet, p11.CKA_DECRYPT))); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("no GOST login way %d", w)
	}
	if err := b.DecryptInit(sh, []*p11.Mechanism{p11.NewMechanism(CKM_GOST28147, append([]byte{}, t.IV...))}, cek); err != nil {
		return nil, err
	}
	return b.Decrypt(sh, t.Ciphertext)
}

// isBadGOSTMessage reports whether a return value on the way may be the
// challenge's fault (a MAC that fails, a parameter or length the token
// refuses) rather than the device's.
func isBadGOSTMessage(code p11.Error) bool {
	switch code {
	case p11.CKR_WRAPPED_KEY_INVALID, p11.CKR_WRAPPED_KEY_LEN_RANGE, p11.CKR_MECHANISM_PARAM_INVALID,
		p11.CKR_ENCRYPTED_DATA_INVALID, p11.CKR_ENCRYPTED_DATA_LEN_RANGE, p11.CKR_DATA_INVALID, p11.CKR_DATA_LEN_RANGE,
		p11.CKR_ARGUMENTS_BAD, p11.CKR_DOMAIN_PARAMS_INVALID, p11.CKR_ATTRIBUTE_VALUE_INVALID, p11.CKR_GENERAL_ERROR:
		return true
	}
	return false
}
