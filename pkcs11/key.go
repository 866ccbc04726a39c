package pkcs11

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/pkcs11/gostkeyx"
	"github.com/signagent/signagent/pkcs11/gostmech"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// Key is a private key on a token, with its certificate: a handle, a
// type, a public half and what its attributes allow. It implements
// crypto.Signer and crypto.Decrypter; the private key never leaves the
// token. It holds its Token, whose pool gives each operation a session of
// its own, so it is safe for concurrent use.
type Key struct {
	tok     *Token
	label   string
	id      []byte
	keyType uint          // CKK_RSA, CKK_EC, gostmech.CKK_GOSTR3410 or gostmech.CKK_GOSTR3410_512
	gost    gostmech.Ways // how a GOST key signs on this token
	pub     crypto.PublicKey
	// pubFromCert: the token shows no public key; pub is the
	// --certificate-file's, proven by a signature (gostraw.go).
	pubFromCert bool
	pubShown    bool // the token showed pub without a login (Identity)
	cert        *x509.Certificate
	sign        bool // CKA_SIGN
	decrypt     bool // CKA_DECRYPT

	mu     sync.Mutex
	handle p11.ObjectHandle
	// How a GOST key opens a certificate login's challenge, asked once.
	gostLoginWays   []gostkeyx.Way
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
	t := &Token{mod: m, module: mod, sel: sel, timeout: sel.Timeout, log: log,
		free: make(chan p11.SessionHandle, sel.MaxSessions), slots: make(chan struct{}, sel.MaxSessions)}
	k, err := t.open(ctx)
	if err != nil {
		t.closeSessions()
		reg.release(m)
		return nil, err
	}
	if k.cert != nil {
		log.Debug().Str("token", t.info.Label).Str("key", k.label).Str("thumbprint", canonical.ThumbprintOf(k.cert)).Msg("key ready")
	}
	return k, nil
}

// open finds the token the selection names, logs in to it and finds the
// one key (and its certificate) the selection names on it.
func (t *Token) open(ctx context.Context) (*Key, error) {
	m := t.mod
	if m.stuck.Load() > 0 {
		// A hung card is not ready, whatever else it still answers.
		return nil, fmt.Errorf("could not open the token: %w (an earlier call into the module has not returned)", tokenerr.ErrTokenTimeout)
	}
	if err := m.ensureInitialized(); err != nil {
		return nil, err
	}
	tok, err := t.findToken(ctx)
	if errors.Is(err, tokenerr.ErrTokenNotFound) || errors.Is(err, ErrOtherToken) || (err != nil && tokenerr.Recoverable(err)) {
		// The module may not have seen the token arrive (or the one it
		// saw leave): SoftHSM and many reader drivers look only in
		// C_Initialize. Look once more after initializing again.
		if rerr := m.reset(m.gen.Load()); rerr == nil {
			tok, err = t.findToken(ctx)
		}
	}
	if err != nil {
		return nil, err
	}
	t.info = tok
	t.gen = m.gen.Load()

	sh, err := t.newSession(ctx)
	if err != nil {
		return nil, err
	}
	pubs, perr := t.publicHalves(ctx, sh)
	if err := t.checkPublic(pubs, perr); err != nil { // before any PIN is sent
		t.discard(ctx, sh)
		return nil, err
	}
	if err := t.login(ctx, sh); err != nil {
		t.discard(ctx, sh)
		return nil, err
	}
	k, err := t.findKey(ctx, sh)
	if err == nil {
		k.pubShown = perr == nil && containsKey(pubs, k.pub)
		err = t.checkKey(k) // before anything is signed with it
	}
	if err == nil && k.IsGOST() {
		err = t.chooseGOST(ctx, k)
	}
	if err == nil && !t.sel.NoCertificate {
		err = t.findCert(ctx, sh, k)
	}
	if err != nil {
		t.discard(ctx, sh)
		return nil, err
	}
	t.key = k
	t.free <- sh
	return k, nil
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
func (k *Key) Token() *Token { return k.tok }

// Usage says what the key's attributes allow: CKA_SIGN and CKA_DECRYPT.
func (k *Key) Usage() (sign, decrypt bool) { return k.sign, k.decrypt }

// GOSTMechanisms says how a GOST key signs on its token, as Open chose
// from the token's mechanisms: hashed, the mechanism that hashes and signs
// (0 when the token has none), else digest (C_Digest) then raw over the
// hash. All are 0 for other keys.
func (k *Key) GOSTMechanisms() (hashed, raw, digest uint) {
	return k.gost.Hashed, k.gost.Raw, k.gost.Digest
}

// Close closes the key's token (Token.Close): a key from Open owns it.
func (k *Key) Close() error {
	if k == nil {
		return nil
	}
	return k.tok.Close()
}

// Check asks the key's token whether it is still there and still knows
// the key (Token.Check).
func (k *Key) Check(ctx context.Context) error { return k.tok.Check(ctx) }
