package gostkeyx

import (
	"fmt"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/internal/gost"
)

// Calls is what a way calls of a PKCS#11 module (pkcs11.Backend has them).
type Calls interface {
	DeriveKey(sh p11.SessionHandle, m []*p11.Mechanism, base p11.ObjectHandle, tmpl []*p11.Attribute) (p11.ObjectHandle, error)
	UnwrapKey(sh p11.SessionHandle, m []*p11.Mechanism, unwrapping p11.ObjectHandle, wrapped []byte, tmpl []*p11.Attribute) (p11.ObjectHandle, error)
	DestroyObject(sh p11.SessionHandle, o p11.ObjectHandle) error
	DecryptInit(sh p11.SessionHandle, m []*p11.Mechanism, o p11.ObjectHandle) error
	Decrypt(sh p11.SessionHandle, ciphertext []byte) ([]byte, error)
}

// Open runs the way w's calls in session sh with the private key h, and
// returns the content. Every session key made on the way is destroyed.
func Open(b Calls, sh p11.SessionHandle, h p11.ObjectHandle, w Way, t *gost.Transport) (out []byte, err error) {
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
	case OneStep:
		m := p11.NewMechanism(CKM_GOSTR3410_KEY_WRAP, params.gostKeyWrapParams(t.UKM, uint(h)))
		if cek, err = keep(b.UnwrapKey(sh, []*p11.Mechanism{m}, h, t.KeyTransport, secret(t.ContentParamSet, p11.CKA_DECRYPT))); err != nil {
			return nil, err
		}
	case DeriveKDF4357, DeriveDiversified:
		kdf := uint(CKD_KDF_GOSTR3411_2012_256)
		if w == DeriveDiversified {
			kdf = CKD_KDF_4357
		}
		m := p11.NewMechanism(CKM_GOSTR3410_12_DERIVE, params.gostDeriveParams(kdf, t.Ephemeral, t.UKM))
		tmpl := append(secret(t.WrapParamSet, p11.CKA_UNWRAP), p11.NewAttribute(p11.CKA_DERIVE, true))
		kek, err := keep(b.DeriveKey(sh, []*p11.Mechanism{m}, h, tmpl))
		if err != nil {
			return nil, err
		}
		if w == DeriveKDF4357 {
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

// IsBadMessage reports whether a return value on the way may be the
// challenge's fault (a MAC that fails, a parameter or length the token
// refuses) rather than the device's.
func IsBadMessage(code p11.Error) bool {
	switch code {
	case p11.CKR_WRAPPED_KEY_INVALID, p11.CKR_WRAPPED_KEY_LEN_RANGE, p11.CKR_MECHANISM_PARAM_INVALID,
		p11.CKR_ENCRYPTED_DATA_INVALID, p11.CKR_ENCRYPTED_DATA_LEN_RANGE, p11.CKR_DATA_INVALID, p11.CKR_DATA_LEN_RANGE,
		p11.CKR_ARGUMENTS_BAD, p11.CKR_DOMAIN_PARAMS_INVALID, p11.CKR_ATTRIBUTE_VALUE_INVALID, p11.CKR_GENERAL_ERROR:
		return true
	}
	return false
}
