package pkcs11

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"sync"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

// DefaultTimeout bounds Open and each token operation when the selection
// names no timeout.
const DefaultTimeout = 30 * time.Second

// Selection names the module, token, key and certificate to use, and where
// the PIN comes from. Fields left empty are filled from URI, then defaulted.
type Selection struct {
	Module       string // module path (flag)
	ModuleSource string // how Module was given, for the log ("flag")
	Token        TokenSelector
	KeyLabel     string
	KeyID        []byte
	URI          string // an RFC 7512 pkcs11: URI
	CertFile     string // PEM or DER certificate, instead of the token's
	PIN          PINSource
	// MaxSessions bounds the sessions opened to the token (default 8).
	MaxSessions int
	// Timeout bounds each token operation of the key once open (default
	// DefaultTimeout). Open itself is bounded by its context.
	Timeout time.Duration
	// AllowFinalTry lets a login go ahead when the token says one more
	// wrong PIN locks it.
	AllowFinalTry bool
	// Registry holds the loaded modules (default: this process's).
	Registry *Registry
	// NoCertificate opens the key without looking for its certificate
	// (provisioning, before the certificate exists).
	NoCertificate bool
	// ModuleConfigDirs are p11-kit's module configuration directories for
	// a URI's module-name (nil: DefaultModuleConfigDirs).
	ModuleConfigDirs []string

	completed bool     // Complete ran
	ignored   []string // vendor attributes of the URI, ignored
}

// ParseKeyID decodes a hex key id, allowing colons between bytes.
func ParseKeyID(s string) ([]byte, error) {
	b, err := hex.DecodeString(strings.ReplaceAll(s, ":", ""))
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("%w: key id %q is not hex", ErrBadSelection, s)
	}
	return b, nil
}

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
	keyType uint // CKK_RSA or CKK_EC
	pub     crypto.PublicKey
	cert    *x509.Certificate
	sign    bool // CKA_SIGN
	decrypt bool // CKA_DECRYPT
	sel     Selection
	timeout time.Duration
	log     zerolog.Logger

	free  chan p11.SessionHandle // idle sessions
	slots chan struct{}          // one token per session that exists

	mu     sync.Mutex
	handle p11.ObjectHandle
	lost   error // set once the token failed; every operation then fails at once
	closed bool
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
		log.Debug().Str("token", k.token.Label).Str("key", k.label).Str("thumbprint", Thumbprint(k.cert)).Msg("key ready")
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
	if errors.Is(err, ErrTokenNotFound) || (err != nil && Recoverable(err)) {
		// The module may not have seen the token arrive: SoftHSM and many
		// reader drivers look only in C_Initialize. Look once more after
		// initializing again.
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
	if err := k.login(ctx, sh); err != nil {
		k.discard(ctx, sh)
		return err
	}
	err = k.findKey(ctx, sh)
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

func (k *Key) findToken(ctx context.Context) (TokenInfo, error) {
	tokens, err := call(ctx, k.mod, listTokens, nil)
	if err != nil {
		return TokenInfo{}, err
	}
	return chooseToken(tokens, k.sel.Token)
}

// login logs the user in, unless the token needs no login. The PIN is
// never sent when the token already refused it, when the PIN is locked, or
// when the next wrong try would lock it (unless the operator allows it).
func (k *Key) login(ctx context.Context, sh p11.SessionHandle) error {
	info := k.token.raw // read just now, when the token was chosen
	if info.Flags&p11.CKF_LOGIN_REQUIRED == 0 {
		return nil
	}
	name := fmt.Sprintf("token %q", k.token.Label)
	if info.Flags&p11.CKF_USER_PIN_LOCKED != 0 {
		return &TokenError{Op: "log in to " + name, Kind: ErrPINLocked, Hint: "unblock the PIN with the security officer PIN (for SoftHSM: pkcs11-tool --init-pin --login --login-type so)"}
	}
	src, err := k.sel.PIN.Resolve()
	if err != nil {
		return err
	}
	key := tokenKey(k.module.Path, k.token)
	if k.mod.reg.wasRefused(key, src.pin) {
		return &TokenError{Op: "log in to " + name, Kind: ErrPINIncorrect,
			Hint: fmt.Sprintf("the PIN from %s was refused before, so it is not tried again (a card locks after a few tries); correct it", src.from)}
	}
	if info.Flags&p11.CKF_USER_PIN_FINAL_TRY != 0 && !k.sel.AllowFinalTry {
		return &TokenError{Op: "log in to " + name, Kind: ErrPINFinalTry,
			Hint: fmt.Sprintf("one more wrong PIN locks the token; check the PIN from %s, then run again with --allow-final-pin-try", src.from)}
	}
	if info.Flags&p11.CKF_USER_PIN_COUNT_LOW != 0 {
		k.log.Warn().Str("token", k.token.Label).Msg("the token says a wrong PIN was entered recently; few tries are left")
	}
	_, err = call(ctx, k.mod, func(b Backend) (struct{}, error) {
		return struct{}{}, b.Login(sh, p11.CKU_USER, src.pin)
	}, nil)
	if isCode(err, p11.CKR_USER_ALREADY_LOGGED_IN) {
		err = nil // another key of this process logged in to the same token
	}
	if err != nil {
		if code, ok := Code(err); ok && (code == p11.CKR_PIN_INCORRECT || code == p11.CKR_PIN_INVALID || code == p11.CKR_PIN_LEN_RANGE) {
			k.mod.reg.rememberPIN(key, src.pin, true)
			te := classify("log in to "+name, err).(*TokenError)
			te.Hint = fmt.Sprintf("check the PIN from %s; it will not be tried again until it changes (a card locks after a few wrong tries)", src.from)
			return te
		}
		return classify("log in to "+name, err)
	}
	k.mod.reg.rememberPIN(key, src.pin, false)
	return nil
}

// newSession opens a session, counted against MaxSessions.
func (k *Key) newSession(ctx context.Context) (p11.SessionHandle, error) {
	select {
	case k.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, k.busy(ctx)
	}
	return k.openSession(ctx)
}

// openSession opens a session for a slot the caller took; the slot is
// given back when the session cannot be opened.
func (k *Key) openSession(ctx context.Context) (p11.SessionHandle, error) {
	sh, err := call(ctx, k.mod, func(b Backend) (p11.SessionHandle, error) {
		return b.OpenSession(k.token.Slot, p11.CKF_SERIAL_SESSION)
	}, nil)
	if err != nil {
		<-k.slots
		return 0, classify(fmt.Sprintf("open a session with token %q", k.token.Label), err)
	}
	return sh, nil
}

// session returns an idle session, or a new one while fewer than
// MaxSessions exist, or waits for one within ctx.
func (k *Key) session(ctx context.Context) (p11.SessionHandle, error) {
	select { // an idle session first: select picks at random among ready cases
	case sh := <-k.free:
		return sh, nil
	default:
	}
	select {
	case sh := <-k.free:
		return sh, nil
	case k.slots <- struct{}{}:
		return k.openSession(ctx)
	case <-ctx.Done():
		return 0, k.busy(ctx)
	}
}

// busy is the error for a deadline that passed while every session was in
// use: a queue problem, not the token's (it is not ErrTokenTimeout, so the
// key is not marked lost for it).
func (k *Key) busy(ctx context.Context) error {
	return fmt.Errorf("could not get a session with token %q: all %d are in use: %w", k.token.Label, cap(k.slots), ctx.Err())
}

// discard closes a session that will not be used again.
func (k *Key) discard(ctx context.Context, sh p11.SessionHandle) {
	_, _ = call(ctx, k.mod, func(b Backend) (struct{}, error) { return struct{}{}, b.CloseSession(sh) }, nil)
	<-k.slots
}

// findKey finds exactly one private key that the selection names and
// reads what is public about it.
func (k *Key) findKey(ctx context.Context, sh p11.SessionHandle) error {
	found, err := k.privateKeys(ctx, sh)
	if err != nil {
		return err
	}
	label, id := k.sel.KeyLabel, k.sel.KeyID
	what := describeSel(label, id)
	switch {
	case len(found) == 0:
		all, _ := call(ctx, k.mod, func(b Backend) ([]keyInfo, error) { return findKeys(b, sh, "", nil) }, nil)
		return fmt.Errorf("%w: no private key %s on token %q; the token has %s", ErrKeyNotFound, what, k.token.Label, listKeys(all))
	case len(found) > 1 && label == "" && len(id) == 0:
		return fmt.Errorf("%w: token %q has %d private keys and none was chosen: %s; choose one with --key-label or --key-id", ErrKeyAmbiguous, k.token.Label, len(found), listKeys(found))
	case len(found) > 1:
		return fmt.Errorf("%w: %d private keys %s on token %q: %s; choose one with --key-label or --key-id", ErrKeyAmbiguous, len(found), what, k.token.Label, listKeys(found))
	}
	ki := found[0]
	if ki.pub == nil {
		return fmt.Errorf("%w: key %q (id %s) is neither RSA nor EC with a public key beside it; signagent signs with RSA and ECDSA keys", ErrTokenRefused, ki.label, hex.EncodeToString(ki.id))
	}
	k.handle, k.label, k.id, k.keyType, k.pub, k.sign, k.decrypt = ki.h, ki.label, ki.id, ki.keyType, ki.pub, ki.sign, ki.decrypt
	return nil
}

func (k *Key) privateKeys(ctx context.Context, sh p11.SessionHandle) ([]keyInfo, error) {
	found, err := call(ctx, k.mod, func(b Backend) ([]keyInfo, error) { return findKeys(b, sh, k.sel.KeyLabel, k.sel.KeyID) }, nil)
	if err != nil {
		return nil, classify("look for the key", err)
	}
	return found, nil
}

// findCert chooses the key's certificate: --cert when given, else the one
// certificate on the token, among those with the key's id or label, whose
// public key is the key's. A valid one beats an expired one; two valid ones
// are an error that lists them.
func (k *Key) findCert(ctx context.Context, sh p11.SessionHandle) error {
	if k.sel.CertFile != "" {
		cert, err := ReadCertificate(k.sel.CertFile)
		if err != nil {
			return err
		}
		if !samePublicKey(cert.PublicKey, k.pub) {
			return fmt.Errorf("%w: certificate %q (thumbprint %s) is for another key than %q", ErrCertMismatch, cert.Subject.String(), Thumbprint(cert), k.label)
		}
		k.setCert(cert)
		return nil
	}
	certs, err := call(ctx, k.mod, func(b Backend) ([]*x509.Certificate, error) { return findCerts(b, sh, k.id, k.label, k.pub) }, nil)
	if err != nil {
		return classify("look for the certificate", err)
	}
	cert, err := chooseCert(certs, k.pub, time.Now())
	if errors.Is(err, ErrCertNotFound) {
		return fmt.Errorf("%w: no certificate with id %s or label %q on token %q; store one on the token or give --cert FILE", ErrCertNotFound, hex.EncodeToString(k.id), k.label, k.token.Label)
	}
	if errors.Is(err, ErrCertMismatch) {
		return fmt.Errorf("%w: the certificates with id %s or label %q on token %q are for another key; store the right one or give --cert FILE", ErrCertMismatch, hex.EncodeToString(k.id), k.label, k.token.Label)
	}
	if err != nil {
		return fmt.Errorf("%w (key %q); give --cert FILE to choose", err, k.label)
	}
	k.setCert(cert)
	return nil
}

func (k *Key) setCert(cert *x509.Certificate) {
	k.cert = cert
	if now := time.Now(); now.After(cert.NotAfter) {
		k.log.Warn().Time("notAfter", cert.NotAfter).Str("key", k.label).Msgf("the certificate expired on %s; the service will likely refuse its signatures", cert.NotAfter.UTC().Format("2006-01-02"))
	} else if now.Before(cert.NotBefore) {
		k.log.Warn().Time("notBefore", cert.NotBefore).Msgf("the certificate is not valid before %s", cert.NotBefore.UTC().Format(time.RFC3339))
	}
}

// chooseCert picks the one certificate for pub among certs (see findCert).
func chooseCert(certs []*x509.Certificate, pub crypto.PublicKey, now time.Time) (*x509.Certificate, error) {
	var valid, invalid []*x509.Certificate
	for _, c := range certs {
		if !samePublicKey(c.PublicKey, pub) {
			continue
		}
		if now.Before(c.NotBefore) || now.After(c.NotAfter) {
			invalid = append(invalid, c)
		} else {
			valid = append(valid, c)
		}
	}
	best := valid
	if len(best) == 0 {
		best = invalid
	}
	switch {
	case len(best) == 1:
		return best[0], nil
	case len(certs) == 0:
		return nil, ErrCertNotFound
	case len(best) == 0:
		return nil, ErrCertMismatch
	}
	names := make([]string, len(best))
	for i, c := range best {
		names[i] = fmt.Sprintf("%s (%q, valid until %s)", Thumbprint(c), c.Subject.CommonName, c.NotAfter.UTC().Format("2006-01-02"))
	}
	state := "valid"
	if len(valid) == 0 {
		state = "expired or not yet valid"
	}
	return nil, fmt.Errorf("%w: %d %s certificates are for the key: %s", ErrCertAmbiguous, len(best), state, strings.Join(names, ", "))
}

// ReadCertificate reads one certificate from a PEM or DER file of at most
// 1 MiB (a certificate is a few KiB).
func ReadCertificate(path string) (*x509.Certificate, error) {
	b, err := ReadFileLimit(path, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCertNotFound, err)
	}
	if blk, _ := pem.Decode(b); blk != nil {
		b = blk.Bytes
	}
	c, err := x509.ParseCertificate(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s holds no certificate (PEM or DER): %w", ErrCertNotFound, path, err)
	}
	return c, nil
}

func samePublicKey(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if e, ok := a.(equaler); ok {
		return e.Equal(b)
	}
	return false
}

// KeyShape describes a certificate's key: "RSA" or "EC" (else the
// algorithm's name), its size in bits, and the curve's name for EC.
func KeyShape(c *x509.Certificate) (kind string, bits int, curve string) {
	switch pub := c.PublicKey.(type) {
	case *rsa.PublicKey:
		return "RSA", pub.N.BitLen(), ""
	case *ecdsa.PublicKey:
		return "EC", pub.Curve.Params().BitSize, pub.Curve.Params().Name
	}
	return c.PublicKeyAlgorithm.String(), 0, ""
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

// Sign signs digest on the token within the selection's timeout. ECDSA
// keys are signed with raw CKM_ECDSA over the digest computed here (SoftHSM
// and many cards offer no hashing ECDSA mechanism); RSA keys with
// CKM_RSA_PKCS over the DigestInfo.
func (k *Key) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout)
	defer cancel()
	return k.SignContext(ctx, digest, opts)
}

// SignContext is Sign bounded by ctx rather than the selection's timeout.
func (k *Key) SignContext(ctx context.Context, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	if !k.sign {
		return nil, fmt.Errorf("%w: key %q may not sign (CKA_SIGN is false)", ErrKeyUsage, k.label)
	}
	mech, data, err := k.signInput(digest, opts)
	if err != nil {
		return nil, err
	}
	sig, err := k.do(ctx, "sign with key "+fmt.Sprintf("%q", k.label), func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		if err := b.SignInit(sh, mech, h); err != nil {
			return nil, err
		}
		return b.Sign(sh, data)
	})
	if err != nil {
		return nil, err
	}
	if k.keyType == p11.CKK_EC {
		return ecdsaDER(sig)
	}
	return sig, nil
}

// Decrypt decrypts an RSA-encrypted message on the token: PKCS#1 v1.5 by
// default or with *rsa.PKCS1v15DecryptOptions, OAEP with *rsa.OAEPOptions.
func (k *Key) Decrypt(_ io.Reader, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout)
	defer cancel()
	return k.DecryptContext(ctx, msg, opts)
}

// CanDecrypt says, without asking the token anything, why the key cannot
// decrypt (not RSA, CKA_DECRYPT false), or nil.
func (k *Key) CanDecrypt() error {
	if k.keyType != p11.CKK_RSA {
		return fmt.Errorf("%w: key %q is not an RSA key; only RSA keys decrypt here", ErrKeyUsage, k.label)
	}
	if !k.decrypt {
		return fmt.Errorf("%w: key %q may not decrypt (CKA_DECRYPT is false); use a key made for encryption, or one with both uses", ErrKeyUsage, k.label)
	}
	return nil
}

// DecryptContext is Decrypt bounded by ctx.
func (k *Key) DecryptContext(ctx context.Context, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	if err := k.CanDecrypt(); err != nil {
		return nil, err
	}
	mech := []*p11.Mechanism{p11.NewMechanism(p11.CKM_RSA_PKCS, nil)}
	if o, ok := opts.(*rsa.OAEPOptions); ok {
		hash, mgf, err := oaepParams(o.Hash)
		if err != nil {
			return nil, err
		}
		// CKZ_DATA_SPECIFIED is the only source PKCS#11 defines, label or not.
		mech = []*p11.Mechanism{p11.NewMechanism(p11.CKM_RSA_PKCS_OAEP, p11.NewOAEPParams(hash, mgf, p11.CKZ_DATA_SPECIFIED, o.Label))}
	}
	return k.do(ctx, fmt.Sprintf("decrypt with key %q", k.label), func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		if err := b.DecryptInit(sh, mech, h); err != nil {
			return nil, err
		}
		out, err := b.Decrypt(sh, msg)
		if code, ok := Code(err); ok && isBadCiphertext(code) {
			// The message's fault, not the device's: the key stays in use.
			// Otherwise whoever chooses the message (a certificate login's
			// challenge) could take the token out of service, and see it.
			return nil, errBadCiphertext
		}
		return out, err
	})
}

// do runs op with a session and the key's handle, and sorts out what went
// wrong: a handle the token no longer knows is looked up once more (the
// token may have been reset); a key that is gone, a session or device that
// broke, or a call that did not return marks the key lost, so that its
// owner reconnects; anything else (a refused mechanism) leaves it usable.
func (k *Key) do(ctx context.Context, what string, op func(Backend, p11.SessionHandle, p11.ObjectHandle) ([]byte, error)) ([]byte, error) {
	k.mu.Lock()
	lost, h := k.lost, k.handle
	k.mu.Unlock()
	if lost != nil {
		return nil, fmt.Errorf("could not %s: %w: %w", what, ErrTokenUnavailable, lost)
	}
	if k.mod.gen.Load() != k.gen {
		return nil, k.markLost(fmt.Errorf("could not %s: %w (the module was initialized again)", what, ErrSessionClosed))
	}
	sh, err := k.session(ctx)
	if err != nil {
		if Recoverable(err) { // the token would not open a session
			return nil, k.markLost(err)
		}
		return nil, err
	}
	abandoned := func() { k.discard(context.Background(), sh) }
	run := func(h p11.ObjectHandle) ([]byte, error) {
		return call(ctx, k.mod, func(b Backend) ([]byte, error) { return op(b, sh, h) }, abandoned)
	}
	out, err := run(h)
	if code, ok := Code(err); ok && (code == p11.CKR_OBJECT_HANDLE_INVALID || code == p11.CKR_KEY_HANDLE_INVALID) {
		k.log.Warn().Str("key", k.label).Msg("the token no longer knows the key's handle; looking the key up again")
		var fresh p11.ObjectHandle
		if fresh, err = k.relookup(ctx, sh); err == nil {
			out, err = run(fresh)
		}
	}
	switch {
	case err == nil:
		k.free <- sh
		return out, nil
	case errors.Is(err, ErrTokenTimeout):
		// The session stays with the call that did not return (abandoned).
		return nil, k.markLost(fmt.Errorf("could not %s: %w", what, err))
	}
	err = classify(what, err)
	if Recoverable(err) {
		k.discard(ctx, sh)
		return nil, k.markLost(err)
	}
	k.free <- sh
	return nil, err
}

// relookup finds the key again after its handle went stale; it must be the
// same key (same public half).
func (k *Key) relookup(ctx context.Context, sh p11.SessionHandle) (p11.ObjectHandle, error) {
	found, err := call(ctx, k.mod, func(b Backend) ([]keyInfo, error) { return findKeys(b, sh, k.label, k.id) }, nil)
	if err != nil {
		return 0, err
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("%w: key %q (id %s) is no longer on token %q", ErrTokenLost, k.label, hex.EncodeToString(k.id), k.token.Label)
	}
	if !samePublicKey(k.pub, found[0].pub) {
		return 0, fmt.Errorf("%w: the key %q found again is not the one the certificate is for", ErrCertMismatch, k.label)
	}
	k.mu.Lock()
	k.handle = found[0].h
	k.mu.Unlock()
	return found[0].h, nil
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

// WithContext returns a crypto.Signer whose Sign is bounded by ctx.
func (k *Key) WithContext(ctx context.Context) crypto.Signer { return ctxSigner{k, ctx} }

type ctxSigner struct {
	k   *Key
	ctx context.Context
}

func (c ctxSigner) Public() crypto.PublicKey { return c.k.Public() }

func (c ctxSigner) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.k.timeout)
	defer cancel()
	return c.k.SignContext(ctx, digest, opts)
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

func (k *Key) closeSessions() {
	if k.mod.stuck.Load() > 0 {
		return // the module is not answering; closing would hang
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for {
		select {
		case sh := <-k.free:
			k.discard(ctx, sh)
		default:
			return
		}
	}
}

// signInput returns the mechanism and the bytes to give C_Sign.
func (k *Key) signInput(digest []byte, opts crypto.SignerOpts) ([]*p11.Mechanism, []byte, error) {
	switch k.keyType {
	case p11.CKK_EC:
		return []*p11.Mechanism{p11.NewMechanism(p11.CKM_ECDSA, nil)}, digest, nil
	case p11.CKK_RSA:
		if _, ok := opts.(*rsa.PSSOptions); ok {
			return nil, nil, fmt.Errorf("%w: RSA-PSS signatures are not offered; signagent signs PKCS#1 v1.5", ErrKeyUsage)
		}
		prefix, ok := digestInfoPrefix[opts.HashFunc()]
		if !ok {
			return nil, nil, fmt.Errorf("%w: no DigestInfo for hash %v", ErrKeyUsage, opts.HashFunc())
		}
		if len(digest) != opts.HashFunc().Size() {
			return nil, nil, fmt.Errorf("%w: the digest is %d bytes, %v wants %d", ErrKeyUsage, len(digest), opts.HashFunc(), opts.HashFunc().Size())
		}
		return []*p11.Mechanism{p11.NewMechanism(p11.CKM_RSA_PKCS, nil)}, append(append([]byte{}, prefix...), digest...), nil
	}
	return nil, nil, fmt.Errorf("%w: unsupported key type", ErrKeyUsage)
}

// digestInfoPrefix is the DER of DigestInfo up to the digest (RFC 8017 9.2).
var digestInfoPrefix = map[crypto.Hash][]byte{
	crypto.SHA256: {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20},
	crypto.SHA384: {0x30, 0x41, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02, 0x05, 0x00, 0x04, 0x30},
	crypto.SHA512: {0x30, 0x51, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03, 0x05, 0x00, 0x04, 0x40},
}

func oaepParams(h crypto.Hash) (hash, mgf uint, err error) {
	switch h {
	case crypto.SHA1, 0:
		return p11.CKM_SHA_1, p11.CKG_MGF1_SHA1, nil
	case crypto.SHA256:
		return p11.CKM_SHA256, p11.CKG_MGF1_SHA256, nil
	case crypto.SHA384:
		return p11.CKM_SHA384, p11.CKG_MGF1_SHA384, nil
	case crypto.SHA512:
		return p11.CKM_SHA512, p11.CKG_MGF1_SHA512, nil
	}
	return 0, 0, fmt.Errorf("%w: OAEP with %v is not offered", ErrKeyUsage, h)
}

// ecdsaDER turns the token's r||s into the ASN.1 form Go and CMS use.
func ecdsaDER(raw []byte) ([]byte, error) {
	if len(raw) == 0 || len(raw)%2 != 0 {
		return nil, fmt.Errorf("%w: the token returned a malformed ECDSA signature", ErrTokenRefused)
	}
	r := new(big.Int).SetBytes(raw[:len(raw)/2])
	s := new(big.Int).SetBytes(raw[len(raw)/2:])
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1BigInt(r)
		b.AddASN1BigInt(s)
	})
	return b.Bytes()
}

// Check asks the token whether it is still there and still knows the key,
// within ctx: a cheap call that lets an idle owner notice a removed or
// hung token before a caller does.
func (k *Key) Check(ctx context.Context) error {
	_, err := k.do(ctx, "check the token", func(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) ([]byte, error) {
		if _, err := b.GetTokenInfo(k.token.Slot); err != nil {
			return nil, err
		}
		_, err := b.GetAttributeValue(sh, h, []*p11.Attribute{p11.NewAttribute(p11.CKA_ID, nil)})
		return nil, err
	})
	return err
}

// errBadCiphertext is a decryption the token refused for the message's
// sake. It carries no return value, so that it is not taken for a device
// failure.
var errBadCiphertext = errors.New("the token could not decrypt the message (bad padding or length)")

// isBadCiphertext reports whether C_Decrypt's return value may mean a
// message the key cannot decrypt. SoftHSM answers bad PKCS#1 v1.5 or OAEP
// padding with CKR_GENERAL_ERROR, not CKR_ENCRYPTED_DATA_INVALID; the
// operation and the session end cleanly either way.
func isBadCiphertext(code p11.Error) bool {
	switch code {
	case p11.CKR_ENCRYPTED_DATA_INVALID, p11.CKR_ENCRYPTED_DATA_LEN_RANGE, p11.CKR_DATA_INVALID, p11.CKR_DATA_LEN_RANGE, p11.CKR_GENERAL_ERROR:
		return true
	}
	return false
}
