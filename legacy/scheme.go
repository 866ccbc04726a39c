package legacy

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/errdefs"
)

// Scheme is the legacy scheme as an authz.Scheme: a selector's identity,
// by password, by the token's certificate or by auth.sid, with its token
// from Tokens. What an identity needs comes from the caller's
// configuration through the hooks, never from the selector: a selector
// names a login, the caller holds its password.
type Scheme struct {
	Tokens *Tokens
	// Password is login's password; an error when the caller has none.
	Password func(login string) (string, error)
	// Certificate is the certificate and the key on the token that
	// decrypts the challenge; nil when certificate login is off.
	Certificate func() (*x509.Certificate, crypto.Decrypter, error)
	// CertificateOff is the error for a certificate identity when
	// Certificate is nil.
	CertificateOff error
	// SidIdentity is the identity by auth.sid of a selector that carries
	// none: trusted authentication for its Credential and ServiceUserID
	// (the agent), or an auth.sid the caller was given (the CLI's
	// --sid-file); nil when the caller has neither.
	SidIdentity func(sel authz.Selector) (Identity, error)
}

// Name is authz.SchemeLegacy.
func (s *Scheme) Name() string { return authz.SchemeLegacy }

// Authorizer resolves a checked legacy selector.
func (s *Scheme) Authorizer(sel authz.Selector) (authz.Authorizer, error) {
	id, err := s.Identity(sel)
	if err != nil {
		return nil, err
	}
	return s.Tokens.For(id), nil
}

// Identity is who sel names, with what the way in needs (Tokens is not
// used).
func (s *Scheme) Identity(sel authz.Selector) (Identity, error) {
	by, err := ParseMethod(sel.By)
	if err != nil {
		return Identity{}, err
	}
	switch by {
	case ByPassword:
		if s.Password == nil {
			return Identity{}, errors.New("no password source for legacy by password")
		}
		pw, err := s.Password(sel.Login)
		if err != nil {
			return Identity{}, err
		}
		return Identity{By: by, Subject: sel.Login, Password: pw}, nil
	case ByCertificate:
		if s.Certificate == nil {
			if s.CertificateOff != nil {
				return Identity{}, s.CertificateOff
			}
			return Identity{}, errdefs.New(errdefs.ErrNotConfigured, "certificate login is not available here")
		}
		cert, key, err := s.Certificate()
		if err != nil {
			return Identity{}, err
		}
		return Identity{By: by, Subject: canonical.ThumbprintOf(cert), Certificate: cert, Key: key}, nil
	}
	if sel.Sid != "" {
		return GivenSid("a given auth.sid", sel.Sid), nil
	}
	if s.SidIdentity == nil {
		return Identity{}, fmt.Errorf("%w: legacy by sid needs an auth.sid here", errdefs.ErrInvalidInput)
	}
	return s.SidIdentity(sel)
}

// GivenSid is the identity of an auth.sid the caller holds; subject names
// it without the secret (where it came from), and the cache is keyed by
// its digest.
func GivenSid(subject, sid string) Identity {
	sum := sha256.Sum256([]byte(sid))
	return Identity{By: BySid, Subject: subject, CacheKey: hex.EncodeToString(sum[:]),
		Sid: func(context.Context) (string, error) { return sid, nil }}
}
