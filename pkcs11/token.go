// Package pkcs11 reaches the partner's signing key on a smart card or HSM
// through a PKCS#11 module. It has two nouns, as crypto11 has: a Token (a
// slot of a loaded module, logged in to, with a pool of sessions; it knows
// whether it is still there) and a Key on it (handle, type, public half,
// certificate), which signs and decrypts through its token. Open chooses
// the token and the key a Selection names, obtains the PIN, and turns what
// the token reports into errors an operator can act on. Every call into
// the module goes through a narrow Backend interface (github.com/miekg/pkcs11
// in production) and is bounded by a context; the module is loaded and
// initialized once per process. What commands read of a module and its
// tokens is package pkcs11/inspect's; what its failures mean, pkcs11/tokenerr's.
package pkcs11

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// Token is a token in a slot of a loaded module, logged in to, with a
// small pool of sessions: what a Key signs and decrypts through. Open
// finds it and the key on it; the key holds it. It notices when the
// token fails (Lost), answers whether it is still there (Check), and
// Close releases the sessions and the module.
type Token struct {
	mod     *module
	gen     uint64 // the module's generation the token was found in
	module  Module
	info    tokeninfo.TokenInfo
	sel     Selection
	timeout time.Duration
	log     zerolog.Logger
	key     *Key // the key Open found on it

	free  chan p11.SessionHandle // idle sessions
	slots chan struct{}          // one token per session that exists

	mu     sync.Mutex
	lost   error // set once the token failed; every operation then fails at once
	closed bool
	// answered is when the token last answered an operation (Unix ns): a
	// check that times out while the token goes on answering others is
	// tokenerr.ErrTokenBusy, not a lost token.
	answered atomic.Int64
}

// Info describes the token (its slot, label, serial, flags when found).
func (t *Token) Info() tokeninfo.TokenInfo { return t.info }

// Module returns the module in use and how it was chosen.
func (t *Token) Module() Module { return t.module }

// Lost returns the token failure that made the token unusable, or nil.
func (t *Token) Lost() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lost
}

// markLost records the first token failure and returns err.
func (t *Token) markLost(err error) error {
	t.mu.Lock()
	if t.lost == nil {
		t.lost = err
		t.log.Debug().Err(err).Str("token", t.info.Label).Msg("the token failed; the key must be opened again")
	}
	t.mu.Unlock()
	return err
}

// Close closes the token's sessions and releases the module; the last user
// finalizes it. After a token failure the module is initialized again, so
// that the token is seen when it comes back. Close never waits on a call
// that did not return, and a second Close does nothing.
func (t *Token) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	lost := t.lost
	t.mu.Unlock()
	t.closeSessions()
	if lost != nil {
		_ = t.mod.reset(t.gen)
	}
	t.mod.reg.release(t.mod)
	return nil
}

// Check asks the token whether it is still there and still knows its key,
// within ctx: a cheap call that lets an idle owner notice a removed or
// hung token before a caller does. The slot is asked first: OpenSC
// answers C_GetTokenInfo and C_GetAttributeValue from memory for as long
// as the card is out or pcscd is stopped, and only C_GetSlotInfo asks
// the reader (at most about once a second), clearing CKF_TOKEN_PRESENT.
func (t *Token) Check(ctx context.Context) error {
	_, err := t.key.do(context.WithValue(ctx, checking{}, true), "check the token", func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		si, err := b.GetSlotInfo(t.info.Slot)
		if err != nil {
			return nil, err
		}
		if si.Flags&p11.CKF_TOKEN_PRESENT == 0 {
			return nil, p11.Error(p11.CKR_TOKEN_NOT_PRESENT)
		}
		if _, err := b.GetTokenInfo(t.info.Slot); err != nil {
			return nil, err
		}
		_, err = b.GetAttributeValue(sh, h, []*p11.Attribute{p11.NewAttribute(p11.CKA_ID, nil)})
		return nil, err
	})
	return err
}

// Read runs fn in the token's module with the token's slot, within ctx,
// for what the token says of itself and needs no session (package
// inspect: its mechanisms, its flags). The module's error is classified
// as the attempt to do what.
func (t *Token) Read(ctx context.Context, what string, fn func(b Backend, slot uint) error) error {
	_, err := call(ctx, t.mod, func(b Backend) (struct{}, error) { return struct{}{}, fn(b, t.info.Slot) }, nil)
	if err != nil {
		return tokenerr.Classify(what, err)
	}
	return nil
}

// usable says why the token cannot be used for what, or nil.
func (t *Token) usable(what string) error {
	t.mu.Lock()
	lost := t.lost
	t.mu.Unlock()
	if lost != nil {
		return fmt.Errorf("could not %s: %w: %w", what, tokenerr.ErrTokenUnavailable, lost)
	}
	if t.mod.gen.Load() != t.gen {
		return t.markLost(fmt.Errorf("could not %s: %w (the module was initialized again)", what, tokenerr.ErrSessionClosed))
	}
	return nil
}

// run runs fn in session sh within ctx; a call abandoned at the deadline
// closes the session when (if ever) it returns.
func (t *Token) run(ctx context.Context, sh p11.SessionHandle, fn func(Backend) ([]byte, error)) ([]byte, error) {
	return call(ctx, t.mod, fn, func() { t.discard(context.Background(), sh) })
}

// settle sorts out what an operation in session sh, started at started,
// came to: the session goes back to the pool, or is closed, or stays with
// a call that did not return; a session or device that broke, or a call
// that did not return, marks the token lost, so that its owner reconnects;
// anything else (a refused mechanism) leaves it usable.
func (t *Token) settle(ctx context.Context, sh p11.SessionHandle, started int64, what string, out []byte, err error) ([]byte, error) {
	switch {
	case err == nil:
		t.answered.Store(time.Now().UnixNano())
		t.free <- sh
		return out, nil
	case errors.Is(err, tokenerr.ErrTokenTimeout) && ctx.Value(checking{}) != nil && t.answered.Load() > started:
		// A check that waited behind operations the token went on
		// answering (a slow card kept busy): busy, not gone. The session
		// stays with the call that did not return.
		return nil, fmt.Errorf("could not %s: %w", what, tokenerr.ErrTokenBusy)
	case errors.Is(err, tokenerr.ErrTokenTimeout):
		// The session stays with the call that did not return (abandoned).
		return nil, t.markLost(fmt.Errorf("could not %s: %w", what, err))
	}
	err = tokenerr.Classify(what, err)
	if tokenerr.Recoverable(err) {
		t.discard(ctx, sh)
		return nil, t.markLost(err)
	}
	t.free <- sh
	return nil, err
}

// checking marks the context of a Check (see settle).
type checking struct{}
