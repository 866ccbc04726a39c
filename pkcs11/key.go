package pkcs11

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"
	"github.com/signagent/signagent/canonical"
)

// Key is a private key on a token, with its certificate. It implements
// crypto.Signer and crypto.Decrypter; the private key never leaves the
// token. It is safe for concurrent use: each operation takes a session of
// its own from a small pool.
type Key struct {
	mod     *module
	gen     uint64 // the module's generation the key was found in
	module  Module
	token   TokenInfo
	label   string
	id      []byte
	keyType uint     // CKK_RSA, CKK_EC, CKK_GOSTR3410 or CKK_GOSTR3410_512
	gost    gostWays // how a GOST key signs on this token
	pub     crypto.PublicKey
	// pubFromCert: the token shows no public key; pub is the
	// --certificate-file's, proven by a signature (gostraw.go).
	pubFromCert bool
	cert        *x509.Certificate
	sign        bool // CKA_SIGN
	decrypt     bool // CKA_DECRYPT
	sel         Selection
	timeout     time.Duration
	log         zerolog.Logger

	free  chan p11.SessionHandle // idle sessions
	slots chan struct{}          // one token per session that exists

	mu     sync.Mutex
	handle p11.ObjectHandle
	lost   error // set once the token failed; every operation then fails at once
	closed bool
	// answered is when the token last answered an operation (Unix ns): a
	// check that times out while the token goes on answering others is
	// ErrTokenBusy, not a lost token.
	answered atomic.Int64
	// How a GOST key opens a certificate login's challenge, asked once.
	gostLoginWays   []GOSTLoginWay
	gostLoginErr    error
	gostLoginProbed bool
}

// Open loads the module (once per process), logs in to the token and finds
// the one key and the one certificate that sel names, all within ctx.
func Open(ctx context.Context, sel Selection, log zerolog.Logger) (*Key, error) {
	sel, err := sel.Complete()
	if err != nil {
		return nil, err
	}
	src := sel.ModuleSource
	if src == "" {
		src = "flag"
	}
	mod, err := ResolveModule(sel.Module, src)
	if err != nil {
		return nil, err
	}
	reg := sel.Registry
	if reg == nil {
		reg = defaultRegistry
	}
	if sel.Timeout <= 0 {
		sel.Timeout = DefaultTimeout
	}
	if sel.MaxSessions < 2 {
		sel.MaxSessions = 8
	}
	ev := log.Debug()
	if mod.Source == "default location" {
		ev = log.Info() // the operator named none: say which one was found
	}
	ev.Str("module", mod.Path).Str("source", mod.Source).Msg("using PKCS#11 module")
	if ign := sel.Ignored(); len(ign) > 0 {
		log.Debug().Strs("attributes", ign).Msg("the pkcs11: URI's vendor attributes are not known here and are ignored")
	}

	m, err := reg.acquire(ctx, mod.Path)
	if err != nil {
		return nil, err
	}
	k := &Key{mod: m, module: mod, sel: sel, timeout: sel.Timeout, log: log,
		free: make(chan p11.SessionHandle, sel.MaxSessions), slots: make(chan struct{}, sel.MaxSessions)}
	if err := k.open(ctx); err != nil {
		k.closeSessions()
		reg.release(m)
		return nil, err
	}
	if k.cert != nil {
		log.Debug().Str("token", k.token.Label).Str("key", k.label).Str("thumbprint", canonical.ThumbprintOf(k.cert)).Msg("key ready")
	}
	return k, nil
}

func (k *Key) open(ctx context.Context) error {
	m := k.mod
	if m.stuck.Load() > 0 {
		// A hung card is not ready, whatever else it still answers.
		return fmt.Errorf("could not open the token: %w (an earlier call into the module has not returned)", ErrTokenTimeout)
	}
	if err := m.ensureInitialized(); err != nil {
		return err
	}
	tok, err := k.findToken(ctx)
	if errors.Is(err, ErrTokenNotFound) || errors.Is(err, ErrOtherToken) || (err != nil && Recoverable(err)) {
		// The module may not have seen the token arrive (or the one it
		// saw leave): SoftHSM and many reader drivers look only in
		// C_Initialize. Look once more after initializing again.
		if rerr := m.reset(m.gen.Load()); rerr == nil {
			tok, err = k.findToken(ctx)
		}
	}
	if err != nil {
		return err
	}
	k.token = tok
	k.gen = m.gen.Load()

	sh, err := k.newSession(ctx)
	if err != nil {
		return err
	}
	if err := k.checkPublic(ctx, sh); err != nil { // before any PIN is sent
		k.discard(ctx, sh)
		return err
	}
	if err := k.login(ctx, sh); err != nil {
		k.discard(ctx, sh)
		return err
	}
	err = k.findKey(ctx, sh)
	if err == nil {
		err = k.checkKey() // before anything is signed with it
	}
	if err == nil && k.IsGOST() {
		err = k.chooseGOST(ctx)
	}
	if err == nil && !k.sel.NoCertificate {
		err = k.findCert(ctx, sh)
	}
	if err != nil {
		k.discard(ctx, sh)
		return err
	}
	k.free <- sh
	return nil
}

// Public returns the key's public half.
func (k *Key) Public() crypto.PublicKey { return k.pub }

// Certificate returns the key's certificate.
func (k *Key) Certificate() *x509.Certificate { return k.cert }

// Label returns the key's CKA_LABEL.
func (k *Key) Label() string { return k.label }

// ID returns the key's CKA_ID.
func (k *Key) ID() []byte { return k.id }

// Token returns the token the key is on.
func (k *Key) Token() TokenInfo { return k.token }

// Module returns the module in use and how it was chosen.
func (k *Key) Module() Module { return k.module }

// Lost returns the token failure that made the key unusable, or nil.
func (k *Key) Lost() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// markLost records the first token failure and returns err.
func (k *Key) markLost(err error) error {
	k.mu.Lock()
	if k.lost == nil {
		k.lost = err
		k.log.Debug().Err(err).Str("key", k.label).Msg("the token failed; the key must be opened again")
	}
	k.mu.Unlock()
	return err
}

// Close closes the key's sessions and releases the module; the last user
// finalizes it. After a token failure the module is initialized again, so
// that the token is seen when it comes back. Close never waits on a call
// that did not return, and a second Close does nothing.
func (k *Key) Close() error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	k.closed = true
	lost := k.lost
	k.mu.Unlock()
	k.closeSessions()
	if lost != nil {
		_ = k.mod.reset(k.gen)
	}
	k.mod.reg.release(k.mod)
	return nil
}

// Check asks the token whether it is still there and still knows the key,
// within ctx: a cheap call that lets an idle owner notice a removed or
// hung token before a caller does. The slot is asked first: OpenSC
// answers C_GetTokenInfo and C_GetAttributeValue from memory for as long
// as the card is out or pcscd is stopped, and only C_GetSlotInfo asks
// the reader (at most about once a second), clearing CKF_TOKEN_PRESENT.
func (k *Key) Check(ctx context.Context) error {
	_, err := k.do(context.WithValue(ctx, checking{}, true), "check the token", func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		si, err := b.GetSlotInfo(k.token.Slot)
		if err != nil {
			return nil, err
		}
		if si.Flags&p11.CKF_TOKEN_PRESENT == 0 {
			return nil, p11.Error(p11.CKR_TOKEN_NOT_PRESENT)
		}
		if _, err := b.GetTokenInfo(k.token.Slot); err != nil {
			return nil, err
		}
		_, err = b.GetAttributeValue(sh, h, []*p11.Attribute{p11.NewAttribute(p11.CKA_ID, nil)})
		return nil, err
	})
	return err
}
