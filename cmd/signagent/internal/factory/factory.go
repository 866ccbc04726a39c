// Package factory builds what signagent's commands need, once per run and
// each part only when first asked for (gh's cmdutil.Factory): the
// settings, the token's key and the CMS signer over it, the trusted and
// legacy clients, the shared store, the OpenID Connect tokens, the
// schemes' settings and the running agent's client. app makes one Factory
// per run, hands it to every family and closes it once the command is
// done; the flag sets two or more families share are here too, beside the
// parts they configure.
package factory

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/probe"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

// Factory builds the parts of one run of signagent, each once and only
// when first asked for: the token selection (its PIN resolved first, so
// that a prompt does not eat --token-timeout), the key on the token, the
// CMS signer over it, the trusted and legacy clients, the shared store,
// the OpenID Connect tokens and the running agent's client. app binds the
// command that runs (Bind) before its action and closes the factory
// (Close) when it is done; a command never closes what it was given.
type Factory struct {
	// Env is the run's streams and logger.
	*cmdutil.Env

	mu  sync.Mutex
	c   *cli.Context
	s   *settings.Settings
	sel *pkcs11.Selection
	key *pkcs11.Key

	storeOnce part[*store.Shared]
	agentOnce part[*agentclient.Client]
	tokens    part[*oidc.Tokens]
}

// part is a part built once: its value and error, kept.
type part[T any] struct {
	done bool
	v    T
	err  error
}

// get builds p with build the first time; later calls give the same.
func (p *part[T]) get(mu *sync.Mutex, build func() (T, error)) (T, error) {
	mu.Lock()
	defer mu.Unlock()
	if !p.done {
		p.v, p.err = build()
		p.done = true
	}
	return p.v, p.err
}

// New is the factory of a run writing to e's streams; nothing is built
// until a command asks.
func New(e *cmdutil.Env) *Factory { return &Factory{Env: e} }

// Bind makes c the command the factory builds for: its flags, the
// environment and the settings file (settings.Of). app calls it once,
// before the command's action runs.
func (f *Factory) Bind(c *cli.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.c, f.s = c, settings.Of(c)
}

// UseSettings makes s the settings the parts are built from, for a
// command that loads its settings itself (doctor's --agent-config);
// called before any part is built.
func (f *Factory) UseSettings(s *settings.Settings) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s = s
}

// Settings are the bound command's settings: flag > environment > file >
// default.
func (f *Factory) Settings() *settings.Settings {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s
}

// Close releases what the run opened: the key and the shared store.
func (f *Factory) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.key != nil {
		f.key.Close()
		f.key = nil
	}
	if f.tokens.v != nil {
		f.tokens.v.Close() // its writer of unsaved records ends
	}
	if f.storeOnce.v != nil {
		f.storeOnce.v.Close()
		f.storeOnce.v = nil
	}
}

// Selection is the flags' token selection with its PIN resolved (a
// prompt on a terminal last), read once.
func (f *Factory) Selection() (pkcs11.Selection, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.selectionLocked()
}

func (f *Factory) selectionLocked() (pkcs11.Selection, error) {
	if f.sel != nil {
		return *f.sel, nil
	}
	sel, err := cmdutil.SelectionFrom(f.s, true)
	if err != nil {
		return sel, err
	}
	// The PIN is asked now (a prompt is not bounded by the token's
	// deadline), unless a reader's keypad stands in for it.
	ctx, cancel := context.WithTimeout(f.c.Context, sel.Timeout)
	defer cancel()
	if sel, err = probe.ResolvePIN(ctx, sel); err != nil {
		return sel, err
	}
	f.sel = &sel
	return sel, nil
}

// Key opens the selected key, within ctx, the first time; later calls
// return the same key.
func (f *Factory) Key(ctx context.Context) (*pkcs11.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.key != nil {
		return f.key, nil
	}
	sel, err := f.selectionLocked()
	if err != nil {
		return nil, err
	}
	if f.key, err = probe.Open(ctx, sel, f.Log); err != nil {
		return nil, err
	}
	return f.key, nil
}

// CMS is the CMS signer the signing flags (--hash, --chain,
// --no-signed-attributes) make over the key, opened within ctx.
func (f *Factory) CMS(ctx context.Context) (*signer.CMS, error) {
	s := f.Settings()
	opts, err := signatureOptions(s)
	if err != nil {
		return nil, err
	}
	key, err := f.Key(ctx)
	if err != nil {
		return nil, err
	}
	if key.IsGOST() && f.c.IsSet("hash") {
		return nil, cmdutil.UsageErr(fmt.Errorf("--hash %s does not apply to the GOST key %q: a GOST R 34.10-2012 key signs with the Streebog of its own size; leave --hash out", s.String("hash"), key.Label()))
	}
	return &signer.CMS{Key: key, Cert: key.Certificate(), Options: opts}, nil
}

// Certificate is the key's certificate and the key as the decrypter of a
// legacy certificate login.
func (f *Factory) Certificate() (*x509.Certificate, crypto.Decrypter, error) {
	key, err := f.Key(f.c.Context)
	if err != nil {
		return nil, nil, err
	}
	return key.Certificate(), key, nil
}

// Trusted is the trusted client of the API key and service flags; sign
// gives it the token's signer, opened when it first signs (a session a
// store holds costs no PIN), each signature bounded by --token-timeout.
func (f *Factory) Trusted(sign bool) (*trusted.Client, error) {
	s := f.Settings()
	if err := cmdutil.Missing(cmdutil.APIKeySpec.Need(s), cmdutil.FlagNeed(f.c, "trusted-url")); err != nil {
		return nil, err
	}
	key, err := cmdutil.APIKeyFrom(s)
	if err != nil {
		return nil, err
	}
	cfg, err := f.TrustedConfig(key)
	if err != nil {
		return nil, err
	}
	if sign {
		cfg.Signer = lazySigner{f}
	}
	return trusted.New(*cfg)
}

// lazySigner opens the key when it first signs. --token-timeout bounds
// the token's work (loading the module, logging in, finding the key,
// signing), not a PIN prompt, which comes first.
type lazySigner struct{ f *Factory }

func (l lazySigner) SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error) {
	sel, err := l.f.Selection()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, sel.Timeout)
	defer cancel()
	cms, err := l.f.CMS(ctx)
	if err != nil {
		return nil, err
	}
	return cms.SignText(ctx, text, ts)
}
