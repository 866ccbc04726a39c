package pkcs11

import (
	"context"
	"fmt"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

func (t *Token) findToken(ctx context.Context) (tokeninfo.TokenInfo, error) {
	tokens, err := call(ctx, t.mod, func(b Backend) ([]tokeninfo.TokenInfo, error) { return tokeninfo.ReadTokens(b) }, nil)
	if err != nil {
		return tokeninfo.TokenInfo{}, err
	}
	tok, err := t.pickToken(tokens)
	if err != nil && len(tokens) == 0 {
		// No slot at all is no reader: OpenSC without pcscd (or with no
		// reader plugged in) lists none, where a reader without its card
		// is an empty slot.
		slots, serr := call(ctx, t.mod, func(b Backend) ([]uint, error) { return b.GetSlotList(false) }, nil)
		if serr == nil && len(slots) == 0 {
			return tokeninfo.TokenInfo{}, fmt.Errorf("%w: token %s is not there: the module sees no slot at all, so no reader (for a smart card: is the reader plugged in and pcscd running?)", tokenerr.ErrTokenNotFound, t.sel.Token)
		}
	}
	return tok, err
}

// login logs the user in, unless the token needs no login. The PIN is
// never sent when the token already refused it, when the PIN is locked, or
// when the next wrong try would lock it (unless the operator allows it).
func (t *Token) login(ctx context.Context, sh p11.SessionHandle) error {
	info := t.info.Raw // read just now, when the token was chosen
	if info.Flags&p11.CKF_LOGIN_REQUIRED == 0 {
		return nil
	}
	name := fmt.Sprintf("token %q", t.info.Label)
	if info.Flags&p11.CKF_USER_PIN_LOCKED != 0 {
		return &tokenerr.TokenError{Op: "log in to " + name, Kind: tokenerr.ErrPINLocked, Hint: "unblock the PIN with the security officer PIN (for SoftHSM: pkcs11-tool --init-pin --login --login-type so)"}
	}
	if t.sel.PIN.pad && info.Flags&p11.CKF_PROTECTED_AUTHENTICATION_PATH != 0 {
		// No PIN was given and the reader has a keypad: C_Login without a
		// PIN, the user types it there.
		t.log.Warn().Str("token", t.info.Label).Msg("enter the PIN on the reader's keypad")
		_, err := call(ctx, t.mod, func(b Backend) (struct{}, error) {
			return struct{}{}, b.Login(sh, p11.CKU_USER, "") // a NULL PIN (miekg/pkcs11 passes none for "")
		}, nil)
		if tokenerr.IsCode(err, p11.CKR_USER_ALREADY_LOGGED_IN) {
			err = nil
		}
		if err != nil {
			return tokenerr.ClassifyLogin("log in to "+name+" on the reader's keypad", err)
		}
		return nil
	}
	src, err := t.sel.PIN.Resolve()
	if err != nil {
		return err
	}
	key := tokenKey(t.module.Path, t.info)
	if t.mod.reg.refused.Refused(key, src.pin) {
		return &tokenerr.TokenError{Op: "log in to " + name, Kind: tokenerr.ErrPINIncorrect,
			Hint: fmt.Sprintf("the PIN from %s was refused before, so it is not tried again (a card locks after a few tries); correct it", src.from)}
	}
	if info.Flags&p11.CKF_USER_PIN_FINAL_TRY != 0 && !t.sel.AllowFinalTry {
		return &tokenerr.TokenError{Op: "log in to " + name, Kind: tokenerr.ErrPINFinalTry,
			Hint: fmt.Sprintf("one more wrong PIN locks the token; check the PIN from %s, then run again with --allow-final-pin-try", src.from)}
	}
	if info.Flags&p11.CKF_USER_PIN_COUNT_LOW != 0 {
		t.log.Warn().Str("token", t.info.Label).Msg("the token says a wrong PIN was entered recently; few tries are left")
	}
	_, err = call(ctx, t.mod, func(b Backend) (struct{}, error) {
		return struct{}{}, b.Login(sh, p11.CKU_USER, src.pin)
	}, nil)
	if tokenerr.IsCode(err, p11.CKR_USER_ALREADY_LOGGED_IN) {
		err = nil // another key of this process logged in to the same token
	}
	if err != nil {
		if code, ok := tokenerr.Code(err); ok && (code == p11.CKR_PIN_INCORRECT || code == p11.CKR_PIN_INVALID || code == p11.CKR_PIN_LEN_RANGE) {
			t.mod.reg.refused.Remember(key, src.pin, true)
			te := tokenerr.ClassifyLogin("log in to "+name, err).(*tokenerr.TokenError)
			te.Hint = fmt.Sprintf("check the PIN from %s; it will not be tried again until it changes (a card locks after a few wrong tries)", src.from)
			return te
		}
		return tokenerr.ClassifyLogin("log in to "+name, err)
	}
	t.mod.reg.refused.Remember(key, src.pin, false)
	return nil
}

// newSession opens a session, counted against MaxSessions.
func (t *Token) newSession(ctx context.Context) (p11.SessionHandle, error) {
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, t.busy(ctx)
	}
	return t.openSession(ctx)
}

// openSession opens a session for a slot the caller took; the slot is
// given back when the session cannot be opened. A session the module
// opens after the caller gave up waiting is closed.
func (t *Token) openSession(ctx context.Context) (p11.SessionHandle, error) {
	var opened p11.SessionHandle // set and read on the call's goroutine
	sh, err := call(ctx, t.mod, func(b Backend) (p11.SessionHandle, error) {
		h, err := b.OpenSession(t.info.Slot, p11.CKF_SERIAL_SESSION)
		if err == nil {
			opened = h
		}
		return h, err
	}, func() {
		if opened != 0 {
			_, _ = call(context.Background(), t.mod, func(b Backend) (struct{}, error) { return struct{}{}, b.CloseSession(opened) }, nil)
		}
	})
	if err != nil {
		<-t.slots
		return 0, tokenerr.Classify(fmt.Sprintf("open a session with token %q", t.info.Label), err)
	}
	return sh, nil
}

// session returns an idle session, or a new one while fewer than
// MaxSessions exist, or waits for one within ctx.
func (t *Token) session(ctx context.Context) (p11.SessionHandle, error) {
	select { // an idle session first: select picks at random among ready cases
	case sh := <-t.free:
		return sh, nil
	default:
	}
	select {
	case sh := <-t.free:
		return sh, nil
	case t.slots <- struct{}{}:
		return t.openSession(ctx)
	case <-ctx.Done():
		return 0, t.busy(ctx)
	}
}

// busy is the error for a deadline that passed while every session was in
// use: a queue problem, not the token's (it is not tokenerr.ErrTokenTimeout, so the
// key is not marked lost for it).
func (t *Token) busy(ctx context.Context) error {
	return fmt.Errorf("could not get a session with token %q: all %d are in use: %w", t.info.Label, cap(t.slots), ctx.Err())
}

// discard closes a session that will not be used again.
func (t *Token) discard(ctx context.Context, sh p11.SessionHandle) {
	_, _ = call(ctx, t.mod, func(b Backend) (struct{}, error) { return struct{}{}, b.CloseSession(sh) }, nil)
	<-t.slots
}

func (t *Token) closeSessions() {
	if t.mod.stuck.Load() > 0 {
		return // the module is not answering; closing would hang
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for {
		select {
		case sh := <-t.free:
			t.discard(ctx, sh)
		default:
			return
		}
	}
}
