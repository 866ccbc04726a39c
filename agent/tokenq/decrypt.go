package tokenq

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"io"

	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11/gostmech"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// decrypter is a Token that can decrypt (pkcs11.Key).
type decrypter interface {
	CanDecrypt() error
	DecryptContext(ctx context.Context, msg []byte, opts crypto.DecrypterOpts) ([]byte, error)
}

// Decrypt decrypts msg with the token's key through the same queue as the
// signatures (a legacy certificate login's challenge).
func (m *Manager) Decrypt(ctx context.Context, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	return m.withToken(ctx, "decrypt", func(ctx context.Context, tok Token) ([]byte, error) {
		d, ok := tok.(decrypter)
		if !ok {
			return nil, fmt.Errorf("%w: this token's key cannot decrypt", tokenerr.ErrKeyUsage)
		}
		return d.DecryptContext(ctx, msg, opts)
	})
}

// withToken runs op with the current token through the queue, detached
// from the caller's cancellation once it runs; a failure that means the
// token is gone takes it out of service.
func (m *Manager) withToken(ctx context.Context, what string, op func(context.Context, Token) ([]byte, error)) ([]byte, error) {
	if !m.State().Ready {
		return nil, m.notReady()
	}
	return m.q.do(ctx, func(ctx context.Context) ([]byte, error) {
		c := m.lease()
		if c == nil {
			return nil, m.notReady()
		}
		defer c.flight.Done()
		out, err := op(context.WithoutCancel(ctx), c.tok)
		if _, ok := tokenerr.Code(err); ok {
			err = tokenerr.Classify(what, err)
		}
		if err != nil && tokenerr.Recoverable(err) {
			m.fail(c, err)
		}
		return out, err
	})
}

// Decrypter is the token's key as a crypto.Decrypter whose operations go
// through the queue, with the certificate that is current now; an error
// while the token is out or when its key may not decrypt.
func (m *Manager) Decrypter() (crypto.Decrypter, *x509.Certificate, error) {
	if m == nil {
		return nil, nil, ErrNoToken
	}
	m.mu.RLock()
	cur := m.cur
	m.mu.RUnlock()
	if cur == nil {
		return nil, nil, m.notReady()
	}
	if g, ok := cur.tok.(gostOpener); ok && g.IsGOST() {
		// A GOST key opens the whole challenge on the token; whether the
		// token can is asked (once) when a login starts.
		return queuedGOST{queuedDecrypter{m, cur.cms.Cert}}, cur.cms.Cert, nil
	}
	if d, ok := cur.tok.(decrypter); ok {
		if err := d.CanDecrypt(); err != nil {
			return nil, nil, err
		}
	}
	return queuedDecrypter{m, cur.cms.Cert}, cur.cms.Cert, nil
}

// gostOpener is a Token whose GOST key opens a certificate login's
// challenge on the token (pkcs11.Key).
type gostOpener interface {
	IsGOST() bool
	CanOpenGOSTContext(ctx context.Context) error
	OpenGOSTContext(ctx context.Context, t *gost.Transport) ([]byte, error)
}

// gost runs op with the current token's GOST key through the queue, as
// Decrypt does for RSA.
func (m *Manager) gost(ctx context.Context, what string, op func(context.Context, gostOpener) ([]byte, error)) ([]byte, error) {
	return m.withToken(ctx, what, func(ctx context.Context, tok Token) ([]byte, error) {
		g, ok := tok.(gostOpener)
		if !ok || !g.IsGOST() {
			return nil, fmt.Errorf("%w: this token's key is not a GOST key", tokenerr.ErrKeyUsage)
		}
		return op(ctx, g)
	})
}

// queuedGOST is a GOST key whose challenge is opened through the queue.
type queuedGOST struct{ queuedDecrypter }

func (d queuedGOST) Public() crypto.PublicKey { return gostmech.CertificatePublicKey(d.cert) }

func (d queuedGOST) IsGOST() bool { return true }

func (d queuedGOST) CanOpenGOSTContext(ctx context.Context) error {
	_, err := d.m.gost(ctx, "read what the GOST key may do", func(ctx context.Context, g gostOpener) ([]byte, error) {
		return nil, g.CanOpenGOSTContext(ctx)
	})
	return err
}

func (d queuedGOST) OpenGOSTContext(ctx context.Context, t *gost.Transport) ([]byte, error) {
	return d.m.gost(ctx, "open the challenge", func(ctx context.Context, g gostOpener) ([]byte, error) {
		return g.OpenGOSTContext(ctx, t)
	})
}

// queuedDecrypter decrypts through the Manager's queue; callers with
// a context use DecryptContext.
type queuedDecrypter struct {
	m    *Manager
	cert *x509.Certificate
}

func (d queuedDecrypter) Public() crypto.PublicKey { return d.cert.PublicKey }

func (d queuedDecrypter) Decrypt(_ io.Reader, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.m.timeout)
	defer cancel()
	return d.m.Decrypt(ctx, msg, opts)
}

func (d queuedDecrypter) DecryptContext(ctx context.Context, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	return d.m.Decrypt(ctx, msg, opts)
}
