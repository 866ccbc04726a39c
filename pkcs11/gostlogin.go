package pkcs11

import (
	"context"
	"errors"
	"fmt"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11/gostkeyx"
	"github.com/signagent/signagent/pkcs11/gostmech"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// A GOST key opens a certificate login's challenge on its token in one of
// the ways of package gostkeyx, the first the token offers.

// gostLogin probes the token once (its mechanisms' flags, the key's
// CKA_DERIVE and CKA_UNWRAP) and caches the ways.
func (k *Key) gostLogin(ctx context.Context) ([]gostkeyx.Way, error) {
	k.mu.Lock()
	ways, err, done := k.gostLoginWays, k.gostLoginErr, k.gostLoginProbed
	k.mu.Unlock()
	if done {
		return ways, err
	}
	if !k.IsGOST() {
		return nil, fmt.Errorf("%w: key %q is not a GOST key", tokenerr.ErrKeyUsage, k.label)
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
			case gostkeyx.CKM_GOSTR3410_12_DERIVE, gostkeyx.CKM_KDF_4357, gostkeyx.CKM_GOSTR3410_KEY_WRAP, gostkeyx.CKM_GOST28147_KEY_WRAP, gostkeyx.CKM_GOST28147:
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
	ways, err = gostkeyx.LoginOffered(flags, derive, unwrap, k.tok.info.Label, k.label)
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
func (k *Key) GOSTLoginWays(ctx context.Context) ([]gostkeyx.Way, error) { return k.gostLogin(ctx) }

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
func (k *Key) OpenGOSTWay(ctx context.Context, w gostkeyx.Way, t *gost.Transport) ([]byte, error) {
	if t.Bits != gostmech.Bits(k.keyType) || !k.IsGOST() {
		return nil, fmt.Errorf("%w: key %q is not a GOST %d-bit key", tokenerr.ErrKeyUsage, k.label, t.Bits)
	}
	return k.do(ctx, fmt.Sprintf("open the challenge with key %q", k.label), func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		out, err := gostkeyx.Open(b, sh, h, w, t)
		if code, ok := tokenerr.Code(err); ok && gostkeyx.IsBadMessage(code) {
			return nil, errGOSTRefused
		}
		return out, err
	})
}
