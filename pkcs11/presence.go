package pkcs11

import (
	"context"
	"fmt"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// Presence follows a key's token out of its reader and back, for `token
// check --removal`. It holds the module, so that the module stays
// initialized while the key is closed and the card is out, as an agent's
// would.
type Presence struct {
	m     *module
	token tokeninfo.TokenInfo
}

// WatchPresence starts following the token; Close ends it.
func (t *Token) WatchPresence(ctx context.Context) (*Presence, error) {
	m, err := t.mod.reg.acquire(ctx, t.mod.path)
	if err != nil {
		return nil, err
	}
	return &Presence{m: m, token: t.info}, nil
}

// Close releases the module (the last user finalizes it).
func (p *Presence) Close() { p.m.reg.release(p.m) }

// Gone asks the reader, through C_GetSlotInfo of the slot the token was
// in, whether the token is out, and if so how the module said it (the
// flag cleared, or the error it answered). C_GetSlotInfo is the call to
// ask: OpenSC answers C_GetTokenInfo from memory while the card is out,
// and C_GetSlotInfo fails with CKR_GENERAL_ERROR while pcscd is down or
// CKR_SLOT_ID_INVALID when the reader went away, which count as out too.
// A module that does not answer within ctx is an error.
func (p *Presence) Gone(ctx context.Context) (bool, string, error) {
	si, err := call(ctx, p.m, func(b Backend) (p11.SlotInfo, error) { return b.GetSlotInfo(p.token.Slot) }, nil)
	code, isCode := tokenerr.Code(err)
	switch {
	case isCode:
		return true, fmt.Sprintf("slot %d: C_GetSlotInfo answered %s", p.token.Slot, tokenerr.CodeName(code)), nil
	case err != nil:
		return false, "", tokenerr.Classify(fmt.Sprintf("read slot %d", p.token.Slot), err)
	case si.Flags&p11.CKF_TOKEN_PRESENT == 0:
		return true, fmt.Sprintf("slot %d: CKF_TOKEN_PRESENT cleared", p.token.Slot), nil
	}
	return false, "", nil
}

// Back looks for the token among those the module lists as present
// (C_GetSlotList(true)), by its label and serial: a card put back may be
// in another slot (another reader, or the driver numbering anew), so the
// slot it was in says nothing. Its slot's C_GetSlotInfo must say it is
// present. Errors of the module (pcscd still starting, a reader coming
// up) are returned for the caller to try again.
func (p *Presence) Back(ctx context.Context) (tokeninfo.TokenInfo, bool, error) {
	type found struct {
		t  tokeninfo.TokenInfo
		ok bool
	}
	f, err := call(ctx, p.m, func(b Backend) (found, error) {
		tokens, err := tokeninfo.ReadTokens(b)
		if err != nil {
			return found{}, err
		}
		for _, t := range tokens {
			if t.Label != p.token.Label || t.Serial != p.token.Serial {
				continue
			}
			si, err := b.GetSlotInfo(t.Slot)
			if err != nil {
				return found{}, tokenerr.Classify(fmt.Sprintf("read slot %d", t.Slot), err)
			}
			if si.Flags&p11.CKF_TOKEN_PRESENT != 0 {
				return found{t, true}, nil
			}
		}
		return found{}, nil
	}, nil)
	return f.t, f.ok, err
}
