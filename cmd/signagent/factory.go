package main

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/internal/settings"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/trusted"
)

// factory builds what a command needs from its flags, each part once and
// only when first asked for (gh's Factory): the token selection, the key
// on the token (opened at most once per run, its PIN resolved first so
// that a prompt does not eat --token-timeout), the CMS signer over it, the
// trusted client. close releases what was opened; a command
// defers it right after newFactory.
type factory struct {
	c *cli.Context
	e *env
	s *settings.Settings

	mu  sync.Mutex
	sel *pkcs11.Selection
	key *pkcs11.Key
}

func newFactory(c *cli.Context, e *env) *factory {
	return &factory{c: c, e: e, s: settings.Of(c)}
}

// close closes the key, if it was opened.
func (f *factory) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.key != nil {
		f.key.Close()
		f.key = nil
	}
}

// selection is the flags' token selection with its PIN resolved (a
// prompt on a terminal last), read once.
func (f *factory) selection() (pkcs11.Selection, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.selectionLocked()
}

func (f *factory) selectionLocked() (pkcs11.Selection, error) {
	if f.sel != nil {
		return *f.sel, nil
	}
	sel, err := selection(f.c)
	if err != nil {
		return sel, err
	}
	// The PIN is asked now (a prompt is not bounded by the token's
	// deadline), unless a reader's keypad stands in for it.
	ctx, cancel := context.WithTimeout(f.c.Context, sel.Timeout)
	defer cancel()
	if sel, err = sel.ResolvePIN(ctx); err != nil {
		return sel, err
	}
	f.sel = &sel
	return sel, nil
}

// openKey opens the selected key, within ctx, the first time; later calls
// return the same key.
func (f *factory) openKey(ctx context.Context) (*pkcs11.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.key != nil {
		return f.key, nil
	}
	sel, err := f.selectionLocked()
	if err != nil {
		return nil, err
	}
	if f.key, err = pkcs11.OpenProbed(ctx, sel, f.e.log); err != nil {
		return nil, err
	}
	return f.key, nil
}

// cms is the CMS signer the signing flags (--hash, --chain,
// --no-signed-attributes) make over the key, opened within ctx.
func (f *factory) cms(ctx context.Context) (*signer.CMS, error) {
	h, err := signer.HashFromName(f.c.String("hash"))
	if err != nil {
		return nil, err
	}
	opts := signer.Options{Hash: h, NoSignedAttributes: f.c.Bool("no-signed-attributes")}
	if file := f.c.String("chain"); file != "" {
		if opts.Chain, err = readCerts(file); err != nil {
			return nil, err
		}
	}
	key, err := f.openKey(ctx)
	if err != nil {
		return nil, err
	}
	if key.IsGOST() && f.c.IsSet("hash") {
		return nil, usageErr(fmt.Errorf("--hash %s does not apply to the GOST key %q: a GOST R 34.10-2012 key signs with the Streebog of its own size; leave --hash out", f.c.String("hash"), key.Label()))
	}
	return &signer.CMS{Key: key, Cert: key.Certificate(), Options: opts}, nil
}

// certificate is the key's certificate and the key as the decrypter of a
// legacy certificate login.
func (f *factory) certificate() (*x509.Certificate, crypto.Decrypter, error) {
	key, err := f.openKey(f.c.Context)
	if err != nil {
		return nil, nil, err
	}
	return key.Certificate(), key, nil
}

// trusted is the trusted client of the API key and service flags; sign
// gives it the token's signer, opened when it first signs (a session a
// store holds costs no PIN), each signature bounded by --token-timeout.
func (f *factory) trusted(sign bool) (*trusted.Client, error) {
	if err := missing(apiKeySecret.need(f.s), flagNeed(f.c, "base-url")); err != nil {
		return nil, err
	}
	key, err := apiKey(f.c)
	if err != nil {
		return nil, err
	}
	cfg, err := serviceConfig(f.s, f.e, key)
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
type lazySigner struct{ f *factory }

func (l lazySigner) SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error) {
	sel, err := l.f.selection()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, sel.Timeout)
	defer cancel()
	cms, err := l.f.cms(ctx)
	if err != nil {
		return nil, err
	}
	return cms.SignText(ctx, text, ts)
}
