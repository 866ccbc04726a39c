package pkcs11

import (
	"bytes"
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
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThalesGroup/crypto11"
	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"
)

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
}

// resolve merges the URI into the selection and checks for conflicts.
func (s Selection) resolve() (Selection, error) {
	if s.URI == "" {
		return s, nil
	}
	u, err := ParseURI(s.URI)
	if err != nil {
		return s, err
	}
	set := func(dst *string, v, what string) error {
		if v == "" {
			return nil
		}
		if *dst != "" && *dst != v {
			return fmt.Errorf("%w: %s is given both by a flag (%q) and by the URI (%q)", ErrBadSelection, what, *dst, v)
		}
		*dst = v
		return nil
	}
	if err := errors.Join(
		set(&s.Token.Label, u.Token, "the token label"),
		set(&s.Token.Serial, u.Serial, "the token serial"),
		set(&s.KeyLabel, u.Object, "the key label"),
		set(&s.PIN.File, u.PINSource, "the PIN file"),
	); err != nil {
		return s, err
	}
	if u.ModulePath != "" {
		if s.Module != "" && s.Module != u.ModulePath {
			return s, fmt.Errorf("%w: the module is given both by a flag and by the URI", ErrBadSelection)
		}
		s.Module, s.ModuleSource = u.ModulePath, "pkcs11 URI"
	}
	if len(u.ID) > 0 {
		if len(s.KeyID) > 0 && !bytes.Equal(s.KeyID, u.ID) {
			return s, fmt.Errorf("%w: the key id is given both by a flag and by the URI", ErrBadSelection)
		}
		s.KeyID = u.ID
	}
	return s, nil
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
// crypto.Signer; the private key never leaves the token.
type Key struct {
	ctx    *crypto11.Context
	cert   *x509.Certificate
	label  string
	id     []byte
	module Module
	token  TokenInfo
	log    zerolog.Logger

	mu     sync.RWMutex
	signer crypto.Signer
	find   func() (crypto.Signer, error) // looks the key up again
}

// Open loads the module, logs in to the token and finds the one key and its
// certificate that sel names.
func Open(sel Selection, log zerolog.Logger) (*Key, error) {
	sel, err := sel.resolve()
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
	ev := log.Debug()
	if mod.Source == "default location" {
		ev = log.Info() // the operator named none: say which one was found
	}
	ev.Str("module", mod.Path).Str("source", mod.Source).Msg("using PKCS#11 module")

	// Choose the token before logging in, so that a wrong label gets a list
	// of what is there rather than crypto11's bare "not found".
	tokens, err := ListTokens(mod.Path)
	if err != nil {
		return nil, err
	}
	tok, err := chooseToken(tokens, sel.Token)
	if err != nil {
		return nil, err
	}
	pin, err := ReadPIN(sel.PIN)
	if err != nil {
		return nil, err
	}
	maxSessions := sel.MaxSessions
	if maxSessions < 2 {
		maxSessions = 8
	}
	cfg := &crypto11.Config{Path: mod.Path, Pin: pin, MaxSessions: maxSessions, PoolWaitTimeout: 30 * time.Second}
	if tok.Serial != "" {
		cfg.TokenSerial = tok.Serial
	} else {
		cfg.TokenLabel = tok.Label
	}
	ctx, err := crypto11.Configure(cfg)
	if err != nil {
		return nil, classify(fmt.Sprintf("log in to token %q", tok.Label), err)
	}
	k := &Key{ctx: ctx, module: mod, token: tok, log: log}
	if err := k.load(sel); err != nil {
		ctx.Close()
		return nil, err
	}
	log.Debug().Str("token", tok.Label).Str("key", k.label).Str("thumbprint", Thumbprint(k.cert)).Msg("key ready")
	return k, nil
}

func (k *Key) load(sel Selection) error {
	signer, err := findOneKey(k.ctx, sel.KeyLabel, sel.KeyID, k.token.Label)
	if err != nil {
		return err
	}
	id, label, err := keyNames(k.ctx, signer)
	if err != nil {
		return err
	}
	k.signer, k.id, k.label = signer, id, label
	k.find = func() (crypto.Signer, error) {
		return findOneKey(k.ctx, sel.KeyLabel, sel.KeyID, k.token.Label)
	}
	cert, err := k.findCert(sel.CertFile)
	if err != nil {
		return err
	}
	if !samePublicKey(cert.PublicKey, signer.Public()) {
		return fmt.Errorf("%w: certificate %q (thumbprint %s) is for another key than %q", ErrCertMismatch, cert.Subject.String(), Thumbprint(cert), label)
	}
	k.cert = cert
	if now := time.Now(); now.After(cert.NotAfter) {
		k.log.Warn().Time("notAfter", cert.NotAfter).Str("key", label).Msgf("the certificate expired on %s; the service will likely refuse its signatures", cert.NotAfter.UTC().Format("2006-01-02"))
	} else if now.Before(cert.NotBefore) {
		k.log.Warn().Time("notBefore", cert.NotBefore).Msgf("the certificate is not valid before %s", cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

func findOneKey(ctx *crypto11.Context, label string, id []byte, token string) (crypto.Signer, error) {
	var found []crypto11.Signer
	var err error
	if label == "" && len(id) == 0 {
		found, err = ctx.FindAllKeyPairs()
	} else {
		found, err = ctx.FindKeyPairs(id, []byte(label))
	}
	if err != nil {
		return nil, classify("look for the key", err)
	}
	what := describeSel(label, id)
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		all, _ := ctx.FindAllKeyPairs()
		return nil, fmt.Errorf("%w: no private key %s on token %q; the token has %s", ErrKeyNotFound, what, token, listKeys(ctx, all))
	}
	if label == "" && len(id) == 0 {
		return nil, fmt.Errorf("%w: token %q has %d private keys and none was chosen: %s; choose one with --key-label or --key-id", ErrKeyAmbiguous, token, len(found), listKeys(ctx, found))
	}
	return nil, fmt.Errorf("%w: %d private keys %s on token %q: %s; choose one with --key-label or --key-id", ErrKeyAmbiguous, len(found), what, token, listKeys(ctx, found))
}

func describeSel(label string, id []byte) string {
	var parts []string
	if label != "" {
		parts = append(parts, fmt.Sprintf("labelled %q", label))
	}
	if len(id) > 0 {
		parts = append(parts, "with id "+hex.EncodeToString(id))
	}
	if len(parts) == 0 {
		return "at all"
	}
	return strings.Join(parts, " and ")
}

func listKeys(ctx *crypto11.Context, keys []crypto11.Signer) string {
	if len(keys) == 0 {
		return "no key pairs"
	}
	var names []string
	for _, s := range keys {
		id, label, err := keyNames(ctx, s)
		if err != nil {
			continue
		}
		names = append(names, fmt.Sprintf("%q (id %s)", label, hex.EncodeToString(id)))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func keyNames(ctx *crypto11.Context, s crypto.Signer) (id []byte, label string, err error) {
	attrs, err := ctx.GetAttributes(s, []crypto11.AttributeType{crypto11.CkaId, crypto11.CkaLabel})
	if err != nil {
		return nil, "", classify("read the key's id and label", err)
	}
	if a := attrs[crypto11.CkaId]; a != nil {
		id = a.Value
	}
	if a := attrs[crypto11.CkaLabel]; a != nil {
		label = string(a.Value)
	}
	return id, label, nil
}

func (k *Key) findCert(file string) (*x509.Certificate, error) {
	if file != "" {
		return ReadCertificate(file)
	}
	var cert *x509.Certificate
	var err error
	if len(k.id) > 0 {
		cert, err = k.ctx.FindCertificate(k.id, nil, nil)
	}
	if err == nil && cert == nil && k.label != "" {
		cert, err = k.ctx.FindCertificate(nil, []byte(k.label), nil)
	}
	if err != nil {
		return nil, classify("look for the certificate", err)
	}
	if cert == nil {
		return nil, fmt.Errorf("%w: no certificate with id %s or label %q on token %q; store one on the token or give --cert FILE", ErrCertNotFound, hex.EncodeToString(k.id), k.label, k.token.Label)
	}
	return cert, nil
}

// ReadCertificate reads one certificate from a PEM or DER file.
func ReadCertificate(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
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
func (k *Key) Public() crypto.PublicKey { return k.cert.PublicKey }

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

// Sign signs digest on the token. ECDSA keys are signed with raw CKM_ECDSA
// over the digest computed here (SoftHSM and many cards offer no hashing
// ECDSA mechanism); RSA keys with CKM_RSA_PKCS over the DigestInfo. When the
// token says the key's handle is no longer valid (the token was reset or
// the object re-created), the key is looked up once more and the signature
// tried again once.
func (k *Key) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	k.mu.RLock()
	s := k.signer
	k.mu.RUnlock()
	sig, err := s.Sign(r, digest, opts)
	if code, ok := Code(err); ok && (code == p11.CKR_OBJECT_HANDLE_INVALID || code == p11.CKR_KEY_HANDLE_INVALID) {
		k.log.Warn().Str("key", k.label).Msg("the token no longer knows the key's handle; looking the key up again")
		fresh, ferr := k.find()
		if ferr != nil {
			return nil, ferr
		}
		if !samePublicKey(k.cert.PublicKey, fresh.Public()) {
			return nil, fmt.Errorf("%w: the key %q found again is not the one the certificate is for", ErrCertMismatch, k.label)
		}
		k.mu.Lock()
		k.signer = fresh
		k.mu.Unlock()
		sig, err = fresh.Sign(r, digest, opts)
	}
	if err != nil {
		return nil, classify(fmt.Sprintf("sign with key %q", k.label), err)
	}
	return sig, nil
}

// WithContext returns a crypto.Signer whose Sign gives up when ctx is done.
// A PKCS#11 call cannot be interrupted: the token finishes it in the
// background and its result is dropped.
func (k *Key) WithContext(ctx context.Context) crypto.Signer { return ctxSigner{k, ctx} }

type ctxSigner struct {
	k   *Key
	ctx context.Context
}

func (c ctxSigner) Public() crypto.PublicKey { return c.k.Public() }

func (c ctxSigner) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	if err := c.ctx.Err(); err != nil {
		return nil, err
	}
	if c.ctx.Done() == nil { // never cancelled: no need to watch it
		return c.k.Sign(r, digest, opts)
	}
	type result struct {
		sig []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		sig, err := c.k.Sign(r, digest, opts)
		done <- result{sig, err}
	}()
	select {
	case res := <-done:
		return res.sig, res.err
	case <-c.ctx.Done():
		return nil, fmt.Errorf("the token did not sign in time: %w", c.ctx.Err())
	}
}

// Close logs out and releases the module when nothing else in the process
// uses it.
func (k *Key) Close() error {
	if k == nil || k.ctx == nil {
		return nil
	}
	return k.ctx.Close()
}
