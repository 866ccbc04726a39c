package pkcs11

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"

	p11 "github.com/miekg/pkcs11"
)

// Peek is what a selection names that a token shows without a login
// (signagent doctor): the token Open would choose, and the key's
// certificate as Open would find it.
type Peek struct {
	Token TokenInfo
	// Cert is the key's certificate, nil with CertErr saying why (no
	// key's public half to match it with, none, or more than one).
	Cert    *x509.Certificate
	CertErr error
}

// PeekSelection loads the selection's module once (in this process: probe
// it first) and reads, without a login, the token Open would choose for
// sel (chooseToken: its slot, label and serial, initialized, the one
// match, with Open's errors), and the key's certificate chosen as Open
// chooses it (keyCertificate), the key's public half read from the public
// key object beside it (Open reads it from the private key). The error is
// the token's; the certificate's is Peek.CertErr.
func PeekSelection(ctx context.Context, sel Selection) (Peek, error) {
	sel, err := sel.Complete()
	if err != nil {
		return Peek{}, err
	}
	mod, err := ResolveModule(sel.Module, "flag")
	if err != nil {
		return Peek{}, err
	}
	m, release, err := useModule(ctx, mod.Path)
	if err != nil {
		return Peek{}, err
	}
	defer release()
	tokens, err := call(ctx, m, ReadTokens, nil)
	if err != nil {
		return Peek{}, err
	}
	tok, err := ChooseToken(tokens, sel.Token)
	if err != nil {
		return Peek{}, err
	}
	p := Peek{Token: tok}
	if sel.CertFile != "" {
		p.Cert, p.CertErr = ReadCertificate(sel.CertFile)
		return p, nil
	}
	p.Cert, p.CertErr = call(ctx, m, func(b Backend) (*x509.Certificate, error) {
		sh, err := b.OpenSession(tok.Slot, p11.CKF_SERIAL_SESSION)
		if err != nil {
			return nil, classify("open a session", err)
		}
		defer b.CloseSession(sh)
		return peekCertificate(b, sh, sel, tok)
	}, nil)
	return p, nil
}

// peekCertificate is the certificate of the one public key the selection
// names (by the key's label and id, or the token's only one).
func peekCertificate(b Backend, sh p11.SessionHandle, sel Selection, tok TokenInfo) (*x509.Certificate, error) {
	hs, err := FindObjects(b, sh, template(p11.CKO_PUBLIC_KEY, sel.KeyLabel, sel.KeyID))
	if err != nil {
		return nil, classify("look for the key's public half", err)
	}
	what := describeSel(sel.KeyLabel, sel.KeyID)
	switch {
	case len(hs) == 0:
		return nil, fmt.Errorf("%w: no public key %s on token %q to find its certificate by without a login (signagent token check logs in)", ErrKeyNotFound, what, tok.Label)
	case len(hs) > 1:
		return nil, fmt.Errorf("%w: %d public keys %s on token %q; choose the key with --key-label or --key-id", ErrKeyAmbiguous, len(hs), what, tok.Label)
	}
	label, id, pub := publicHalf(b, sh, hs[0])
	if pub == nil {
		return nil, fmt.Errorf("%w: the public key %q on token %q cannot be read, so its certificate is not found without a login (signagent token check logs in)", ErrKeyNotFound, label, tok.Label)
	}
	return keyCertificate(b, sh, id, label, pub, tok.Label)
}

// publicHalf reads a public-key object's label, id and public half (RSA,
// EC or GOST; nil when it cannot be read), without a login.
func publicHalf(b Backend, sh p11.SessionHandle, h p11.ObjectHandle) (label string, id []byte, pub crypto.PublicKey) {
	a := Attributes(b, sh, h, p11.CKA_LABEL, p11.CKA_ID, p11.CKA_KEY_TYPE, p11.CKA_MODULUS, p11.CKA_PUBLIC_EXPONENT, p11.CKA_EC_PARAMS, p11.CKA_EC_POINT)
	keyType := ULong(a[p11.CKA_KEY_TYPE])
	pub = publicKey(keyType, a)
	if isGOSTKeyType(keyType) {
		g := Attributes(b, sh, h, CKA_GOSTR3410_PARAMS, p11.CKA_VALUE)
		if gp, err := gostPublic(keyType, g); err == nil {
			pub = gp
		}
	}
	return string(a[p11.CKA_LABEL]), a[p11.CKA_ID], pub
}
