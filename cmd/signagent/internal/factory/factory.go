package factory

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/trusted"
)

// Factory builds what a command needs from its flags, each part once and
// only when first asked for (gh's Factory): the token selection, the key
// on the token (opened at most once per run, its PIN resolved first so
// that a prompt does not eat --token-timeout), the CMS signer over it, the
// Trusted client. close releases what was opened; a command
// defers it right after newFactory.
type Factory struct {
	Context  *cli.Context
	e        *cmdutil.Env
	Settings *settings.Settings

	mu  sync.Mutex
	sel *pkcs11.Selection
	key *pkcs11.Key
}

func New(c *cli.Context, e *cmdutil.Env) *Factory {
	return &Factory{Context: c, e: e, Settings: settings.Of(c)}
}

// Close closes the key, if it was opened.
func (f *Factory) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.key != nil {
		f.key.Close()
		f.key = nil
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
	sel, err := cmdutil.Selection(f.Context)
	if err != nil {
		return sel, err
	}
	// The PIN is asked now (a prompt is not bounded by the token's
	// deadline), unless a reader's keypad stands in for it.
	ctx, cancel := context.WithTimeout(f.Context.Context, sel.Timeout)
	defer cancel()
	if sel, err = sel.ResolvePIN(ctx); err != nil {
		return sel, err
	}
	f.sel = &sel
	return sel, nil
}

// OpenKey opens the selected key, within ctx, the first time; later calls
// return the same key.
func (f *Factory) OpenKey(ctx context.Context) (*pkcs11.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.key != nil {
		return f.key, nil
	}
	sel, err := f.selectionLocked()
	if err != nil {
		return nil, err
	}
	if f.key, err = pkcs11.OpenProbed(ctx, sel, f.e.Log); err != nil {
		return nil, err
	}
	return f.key, nil
}

// CMS is the CMS signer the signing flags (--hash, --chain,
// --no-signed-attributes) make over the key, opened within ctx.
func (f *Factory) CMS(ctx context.Context) (*signer.CMS, error) {
	h, err := signer.HashFromName(f.Context.String("hash"))
	if err != nil {
		return nil, err
	}
	opts := signer.Options{Hash: h, NoSignedAttributes: f.Context.Bool("no-signed-attributes")}
	if file := f.Context.String("chain"); file != "" {
		if opts.Chain, err = cmdutil.ReadCerts(file); err != nil {
			return nil, err
		}
	}
	key, err := f.OpenKey(ctx)
	if err != nil {
		return nil, err
	}
	if key.IsGOST() && f.Context.IsSet("hash") {
		return nil, cmdutil.UsageErr(fmt.Errorf("--hash %s does not apply to the GOST key %q: a GOST R 34.10-2012 key signs with the Streebog of its own size; leave --hash out", f.Context.String("hash"), key.Label()))
	}
	return &signer.CMS{Key: key, Cert: key.Certificate(), Options: opts}, nil
}

// Certificate is the key's certificate and the key as the decrypter of a
// legacy certificate login.
func (f *Factory) Certificate() (*x509.Certificate, crypto.Decrypter, error) {
	key, err := f.OpenKey(f.Context.Context)
	if err != nil {
		return nil, nil, err
	}
	return key.Certificate(), key, nil
}

// Trusted is the trusted client of the API key and service flags; sign
// gives it the token's signer, opened when it first signs (a session a
// store holds costs no PIN), each signature bounded by --token-timeout.
func (f *Factory) Trusted(sign bool) (*trusted.Client, error) {
	if err := cmdutil.Missing(cmdutil.APIKeySecret.Need(f.Settings), cmdutil.FlagNeed(f.Context, "trusted-url")); err != nil {
		return nil, err
	}
	key, err := cmdutil.APIKey(f.Context)
	if err != nil {
		return nil, err
	}
	cfg, err := ServiceConfig(f.Settings, f.e, key)
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
