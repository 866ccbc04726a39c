package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/signagent/signagent/api"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/trusted"
)

// Legacy is the legacy scheme in the agent: the token cache (its client
// holds the developer key) and the passwords of the accounts it may log in
// as, both from the agent's own configuration, never from callers.
type Legacy struct {
	Tokens    *legacy.Tokens
	Passwords map[string]string // login -> password
}

// errLegacyHeaderHidden answers legacy /v1/authorizations unless the
// operator allowed it: the header value holds the integrator's developer
// key, which callers of the proxy never see.
var errLegacyHeaderHidden = errdefs.New(errdefs.ErrForbidden, "this agent does not hand out legacy Authorization headers (they hold the integrator's developer key): call the business method through the proxy, /v1/service/{method} with Signagent-Identity, or start the agent with --expose-legacy-header")

// errCertificateLoginOff answers legacy certificate identities when the
// operator turned certificate login off.
var errCertificateLoginOff = errdefs.New(errdefs.ErrForbidden, "certificate login is turned off in this agent (--certificate-login=false): the token decrypts no challenge; use another identity")

// errLegacyNotConfigured answers legacy authorizations without --api-url.
var errLegacyNotConfigured = errdefs.New(errdefs.ErrNotConfigured, "the legacy scheme is not configured (--api-url and the developer key)")

// SetLegacy replaces the legacy scheme's configuration (start, reload);
// nil turns it off.
func (a *Agent) SetLegacy(l *Legacy) {
	if l != nil && l.Tokens != nil {
		l.Tokens.Share(a.now().shared)
	}
	a.update(func(s *state) { s.legacy = l })
}

// authorization is POST /v1/authorizations: the Authorization header
// value of a business call, cached per identity, one login at a time.
func (a *Agent) authorization(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	entry := entryFor(r, "authorization")
	var req api.AuthorizationRequest
	resp, err := func() (*api.AuthorizationResponse, error) {
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		sel := selectorOf(req)
		if err := sel.Check(); err != nil {
			return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidInput, err)
		}
		if sel.Scheme == authz.SchemeLegacy && !a.now().policy.ExposeLegacyHeader {
			return nil, errLegacyHeaderHidden
		}
		id, err := a.identity(sel, &entry)
		if err != nil {
			return nil, err
		}
		return id.token(r.Context(), req.Refresh)
	}()
	a.finish(w, r, entry, start, resp, err)
}

// identity is one scheme's identity in the agent: its header value
// (cached, or obtained; refresh forces a new one), how to drop a value the
// service refused, and its name for messages (no secret).
type identity struct {
	name   string
	token  func(ctx context.Context, refresh bool) (*api.AuthorizationResponse, error)
	reject func(value string)
}

// selectorOf is the body of /v1/authorizations as the selector it means,
// normalized (Check is the caller's).
func selectorOf(req api.AuthorizationRequest) authz.Selector {
	sel := authz.Selector{Scheme: req.Scheme, Profile: req.Profile, By: req.By, Login: req.Login, Sid: req.Sid, ServiceUserID: req.ServiceUserID}
	if req.Credential != nil {
		c := authz.Credential(*req.Credential)
		sel.Credential = &c
	}
	return sel.Normalize()
}

// agentScheme is one scheme as the agent serves it: the identity it makes
// of a checked selector naming it (entry gets the scheme and identity for
// the audit log).
type agentScheme struct {
	name     string
	identity func(a *Agent, sel authz.Selector, entry *auditEntry) (*identity, error)
}

// agentSchemes are the schemes /v1/authorizations and the proxy serve;
// authz.Selector.Check knows their selectors.
var agentSchemes = []agentScheme{
	{authz.SchemeLegacy, (*Agent).legacyIdentityOf},
	{authz.SchemeOIDC, (*Agent).oidcIdentity},
}

// identity resolves a checked selector to its scheme's identity.
func (a *Agent) identity(sel authz.Selector, entry *auditEntry) (*identity, error) {
	for _, s := range agentSchemes {
		if s.name == sel.Scheme {
			return s.identity(a, sel, entry)
		}
	}
	return nil, fmt.Errorf("%w: scheme %q: want legacy or oidc", errdefs.ErrInvalidInput, httpx.Printable(sel.Scheme, 32))
}

func (a *Agent) legacyIdentityOf(req authz.Selector, entry *auditEntry) (*identity, error) {
	l := a.now().legacy
	if l == nil {
		return nil, errLegacyNotConfigured
	}
	id, dropSession, err := a.legacyIdentity(l, req)
	if err != nil {
		return nil, err
	}
	entry.scheme, entry.identity = "legacy", id.String()
	auth := l.Tokens.For(id)
	token := func(ctx context.Context, refresh bool) (*api.AuthorizationResponse, error) {
		if refresh {
			l.Tokens.ForgetOlder(id, a.o.RefreshFloor)
		}
		tok, from, err := l.Tokens.TokenFrom(ctx, id)
		// A cached auth.sid the service no longer takes is dropped and the
		// trusted flow runs once more.
		var se *legacy.ServiceError
		if errors.As(err, &se) && se.Status == http.StatusUnauthorized && se.Code != legacy.CodeAuth && dropSession != nil && dropSession() {
			tok, from, err = l.Tokens.TokenFrom(ctx, id)
		}
		cached := from != legacy.FromLogin
		a.metrics.observeAuthorization("legacy", cached, err)
		if err != nil {
			return nil, err
		}
		a.metrics.sources.WithLabelValues("legacy", from).Inc()
		entry.cached, entry.source = &cached, from
		return &api.AuthorizationResponse{Authorization: l.Tokens.Client().Header(tok.Value), ExpiresAt: tok.ExpiresAt, Cached: cached}, nil
	}
	return &identity{name: auth.String(), token: token, reject: auth.Reject}, nil
}

// oidcIdentity is a profile's Bearer header from the token store an
// operator signed in to with signagent login, refreshed ahead of expiry.
func (a *Agent) oidcIdentity(req authz.Selector, entry *auditEntry) (*identity, error) {
	t := a.now().oidc
	if t == nil {
		return nil, errOIDCNotConfigured
	}
	profile := req.Profile
	if profile == "" {
		profile = "default"
	}
	if err := oidc.CheckProfile(profile); err != nil {
		return nil, err
	}
	entry.scheme, entry.identity = "oidc", "profile "+profile
	auth := t.For(profile)
	token := func(ctx context.Context, refresh bool) (*api.AuthorizationResponse, error) {
		if refresh {
			t.ExpireOlder(profile, a.o.RefreshFloor)
		}
		rec, from, err := t.TokenFrom(ctx, profile)
		cached := from != oidc.FromRefresh
		a.metrics.observeAuthorization("oidc", cached, err)
		if err != nil {
			return nil, err
		}
		a.metrics.sources.WithLabelValues("oidc", from).Inc()
		entry.identity = "profile " + profile + " (" + rec.Subject + ")"
		entry.cached, entry.source = &cached, from
		return &api.AuthorizationResponse{Authorization: rec.Header(), ExpiresAt: rec.Expiry, Cached: cached}, nil
	}
	return &identity{name: auth.String(), token: token, reject: auth.Reject}, nil
}

// SetOIDC replaces the OpenID Connect token source (start, reload); nil
// turns the scheme off.
func (a *Agent) SetOIDC(t *oidc.Tokens) { a.update(func(s *state) { s.oidc = t }) }

var errOIDCNotConfigured = errdefs.New(errdefs.ErrNotConfigured, "the OpenID Connect scheme is not configured in this agent")

// legacyIdentity is who the request names, with what the way in needs.
func (a *Agent) legacyIdentity(l *Legacy, req authz.Selector) (legacy.Identity, func() bool, error) {
	by, err := legacy.ParseMethod(req.By)
	if err != nil {
		return legacy.Identity{}, nil, err
	}
	switch by {
	case legacy.ByPassword:
		pw, ok := l.Passwords[req.Login]
		if !ok {
			return legacy.Identity{}, nil, fmt.Errorf("%w: no password for login %q in the agent's configuration (--legacy-password-file LOGIN=FILE)", errdefs.ErrInvalidInput, req.Login)
		}
		return legacy.Identity{By: by, Subject: req.Login, Password: pw}, nil, nil
	case legacy.ByCertificate:
		if a.now().policy.NoCertificateLogin {
			return legacy.Identity{}, nil, errCertificateLoginOff
		}
		key, cert, err := a.tm.Decrypter()
		if err != nil {
			return legacy.Identity{}, nil, err
		}
		return legacy.Identity{By: by, Subject: pkcs11.Thumbprint(cert), Certificate: cert, Key: key}, nil, nil
	}
	if req.Sid != "" {
		sum := sha256.Sum256([]byte(req.Sid))
		sid := req.Sid
		return legacy.Identity{By: by, Subject: "a given auth.sid", CacheKey: hex.EncodeToString(sum[:]),
			Sid: func(context.Context) (string, error) { return sid, nil }}, nil, nil
	}
	return a.sidChain(req)
}

// sidChain is the identity of a trusted user: its auth.sid comes from the
// session cache (trusted authentication on the token when there is none).
// The selector is checked: it has a credential and a serviceUserId.
func (a *Agent) sidChain(req authz.Selector) (legacy.Identity, func() bool, error) {
	cred, err := parseCredential(api.Credential(*req.Credential), a.o.LegacySNILS)
	if err != nil {
		return legacy.Identity{}, nil, err
	}
	userID := req.ServiceUserID
	if err := trusted.CheckServiceUserID(userID); err != nil {
		return legacy.Identity{}, nil, err
	}
	c := a.now().client
	if c == nil {
		return legacy.Identity{}, nil, errNotConfigured
	}
	k := trusted.SessionKey{Kind: cred.Kind, Value: cred.Value, ServiceUserID: userID}
	return legacy.Identity{By: legacy.BySid, Subject: "trusted " + cred.Masked() + " serviceUserId=" + userID, CacheKey: k.String(),
		Sid: func(ctx context.Context) (string, error) {
			s, _, err := a.cache.Obtain(ctx, k, false, 0, a.o.RequestDeadline,
				func(ctx context.Context) (*trusted.Session, error) { return c.Session(ctx, cred, userID) })
			if err != nil {
				return "", err
			}
			return s.Sid, nil
		}}, func() bool { return a.cache.Drop(k) }, nil
}
