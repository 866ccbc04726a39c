package inspect

import (
	"context"
	"crypto/x509"
	"fmt"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/object"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// Peek is what a selection names that a token shows without a login
// (signagent doctor): the token Open would choose, and the key's
// certificate as Open would find it.
type Peek struct {
	Token tokeninfo.TokenInfo
	// Cert is the key's certificate, nil with CertErr saying why (no
	// key's public half to match it with, none, or more than one).
	Cert    *x509.Certificate
	CertErr error
}

// PeekSelection loads the selection's module once (in this process: probe
// it first) and reads, without a login, the token Open would choose for
// sel (tokeninfo.ChooseToken: its slot, label and serial, initialized, the one
// match, with Open's errors), and the key's certificate chosen as Open
// chooses it (pkcs11.KeyCertificate), the key's public half read from the public
// key object beside it (Open reads it from the private key). The error is
// the token's; the certificate's is Peek.CertErr.
func PeekSelection(ctx context.Context, sel pkcs11.Selection) (Peek, error) {
	sel, err := sel.Complete()
	if err != nil {
		return Peek{}, err
	}
	mod, err := pkcs11.ResolveModule(sel.Module, "flag")
	if err != nil {
		return Peek{}, err
	}
	release, err := pkcs11.HoldModule(ctx, mod.Path)
	if err != nil {
		return Peek{}, err
	}
	defer release()
	var p Peek
	err = pkcs11.WithModule(ctx, mod.Path, func(b pkcs11.Backend) error {
		tokens, err := tokeninfo.ReadTokens(b)
		if err == nil {
			p.Token, err = tokeninfo.ChooseToken(tokens, sel.Token)
		}
		return err
	})
	if err != nil {
		return Peek{}, err
	}
	if sel.CertFile != "" {
		p.Cert, p.CertErr = pkcs11.ReadCertificate(sel.CertFile)
		return p, nil
	}
	p.CertErr = pkcs11.WithModule(ctx, mod.Path, func(b pkcs11.Backend) error {
		sh, err := b.OpenSession(p.Token.Slot, p11.CKF_SERIAL_SESSION)
		if err != nil {
			return tokenerr.Classify("open a session", err)
		}
		defer b.CloseSession(sh)
		p.Cert, err = peekCertificate(b, sh, sel, p.Token)
		return err
	})
	return p, nil
}

// peekCertificate is the certificate of the one public key the selection
// names (by the key's label and id, or the token's only one).
func peekCertificate(b pkcs11.Backend, sh p11.SessionHandle, sel pkcs11.Selection, tok tokeninfo.TokenInfo) (*x509.Certificate, error) {
	hs, err := object.FindObjects(b, sh, object.Template(p11.CKO_PUBLIC_KEY, sel.KeyLabel, sel.KeyID))
	if err != nil {
		return nil, tokenerr.Classify("look for the key's public half", err)
	}
	what := object.DescribeKey(sel.KeyLabel, sel.KeyID)
	switch {
	case len(hs) == 0:
		return nil, fmt.Errorf("%w: no public key %s on token %q to find its certificate by without a login (signagent token check logs in)", tokenerr.ErrKeyNotFound, what, tok.Label)
	case len(hs) > 1:
		return nil, fmt.Errorf("%w: %d public keys %s on token %q; choose the key with --key-label or --key-id", tokenerr.ErrKeyAmbiguous, len(hs), what, tok.Label)
	}
	label, id, pub := object.PublicHalf(b, sh, hs[0])
	if pub == nil {
		return nil, fmt.Errorf("%w: the public key %q on token %q cannot be read, so its certificate is not found without a login (signagent token check logs in)", tokenerr.ErrKeyNotFound, label, tok.Label)
	}
	return pkcs11.KeyCertificate(b, sh, id, label, pub, tok.Label)
}
