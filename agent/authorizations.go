package agent

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"net/http"
	"time"

	"github.com/signagent/signagent/agent/auditlog"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/trusted"
)

// errLegacyHeaderHidden answers legacy /v1/authorizations unless the
// operator allowed it: the header value holds the integrator's developer
// key, which callers of the proxy never see.
var errLegacyHeaderHidden = errdefs.New(errdefs.ErrForbidden, "this agent does not hand out legacy Authorization headers (they hold the integrator's developer key): call the business method through the proxy, /v1/service/{method} with Signagent-Identity, or start the agent with --expose-legacy-header")

// errCertificateLoginOff answers legacy certificate identities when the
// operator turned certificate login off.
var errCertificateLoginOff = errdefs.New(errdefs.ErrForbidden, "certificate login is turned off in this agent (--certificate-login=false): the token decrypts no challenge; use another identity")

// authorization is POST /v1/authorizations: the Authorization header
// value of a business call, cached per identity, one login at a time.
func (a *Agent) authorization(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	entry := entryFor(r, "authorization")
	var req agentapi.AuthorizationRequest
	resp, err := func() (*agentapi.AuthorizationResponse, error) {
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		sel := authz.OfRequest(req)
		if err := sel.Check(); err != nil {
			return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidInput, err)
		}
		if sel.Scheme == authz.SchemeLegacy && !a.now().policy.ExposeLegacyHeader {
			return nil, errLegacyHeaderHidden
		}
		au, err := a.authorizer(sel, &entry)
		if err != nil {
			return nil, err
		}
		if req.Refresh {
			au.Forget(a.cfg.RefreshFloor)
		}
		h, err := au.Header(r.Context())
		if err != nil {
			return nil, err
		}
		return &agentapi.AuthorizationResponse{Authorization: h.Value, ExpiresAt: agentapi.At(h.ExpiresAt), Cached: h.Cached}, nil
	}()
	a.finish(w, r, entry, start, resp, err)
}

// authorizer resolves a checked selector to its scheme's Authorizer,
// observed: entry gets the scheme and identity for the audit log, and
// each header obtained is counted.
func (a *Agent) authorizer(sel authz.Selector, entry *auditlog.Entry) (authz.Authorizer, error) {
	au, err := a.now().schemes.Authorizer(sel)
	if err != nil {
		return nil, err
	}
	id := au.Identity()
	entry.Scheme, entry.Identity = sel.Scheme, id
	return &observed{Authorizer: au, a: a, scheme: sel.Scheme, identity: id, entry: entry}, nil
}

// observed is an Authorizer whose headers the agent counts (by result and
// by source) and writes to the call's audit entry.
type observed struct {
	authz.Authorizer
	a        *Agent
	scheme   string
	identity string // the Authorizer's, asked once
	entry    *auditlog.Entry
}

func (o *observed) Header(ctx context.Context) (authz.Header, error) {
	h, err := o.Authorizer.Header(ctx)
	o.a.metrics.Authorization(o.scheme, h.Cached, err)
	o.a.sawHeader(o.scheme, h.Source, err)
	if err != nil {
		return h, err
	}
	o.a.metrics.Source(o.scheme, h.Source)
	if h.Subject != "" {
		o.entry.Identity = o.identity + " (" + h.Subject + ")"
	}
	o.entry.Cached, o.entry.Source = &h.Cached, h.Source
	o.a.held.note(o.scheme, o.identity, h, time.Now())
	return h, nil
}

// Reject drops the refused value and its entry in the index.
func (o *observed) Reject(value string) {
	o.Authorizer.Reject(value)
	o.a.held.forget(o.scheme, o.identity)
}

// lend is what the agent lends the schemes st is built with: the token's
// decrypter unless certificate login is off, the shared store, trusted
// sessions for a legacy identity by credential, the log, the refresh
// metrics and the schemes st replaces (a scheme whose settings did not
// change keeps its cache).
func (a *Agent) lend(st *state, timeout time.Duration) schemes.Deps {
	d := schemes.Deps{Store: st.shared, Log: a.cfg.Log, Timeout: timeout, Was: a.now().schemes,
		Sid: func(sel authz.Selector) (schemes.Sid, error) { return a.trustedSid(st, sel) },
		Refreshed: func(scheme, identity, result string) {
			a.metrics.Refresh(scheme, result)
			a.cfg.Log.Info().Str("scheme", scheme).Str("identity", identity).Str("result", result).Msg("refresh")
		},
		CertLogin: a.certLogin}
	if st.policy.NoCertificateLogin {
		d.NoDecrypter = errCertificateLoginOff
	} else {
		d.Decrypter = func() (*x509.Certificate, crypto.Decrypter, error) {
			key, cert, err := a.tm.Decrypter()
			return cert, key, err
		}
	}
	return d
}

// trustedSid is the auth.sid of a trusted user: from the session cache
// (trusted authentication on the token when there is none), and one the
// service no longer takes is dropped from it. The selector is checked: it
// has a credential and a serviceUserId.
func (a *Agent) trustedSid(st *state, req authz.Selector) (schemes.Sid, error) {
	cred, err := parseCredential(agentapi.Credential(*req.Credential), a.cfg.LegacySNILS)
	if err != nil {
		return schemes.Sid{}, err
	}
	userID := req.ServiceUserID
	if err := trusted.CheckServiceUserID(userID); err != nil {
		return schemes.Sid{}, err
	}
	c := st.client
	if c == nil {
		return schemes.Sid{}, errNotConfigured
	}
	k := trusted.SessionKey{Kind: cred.Kind, Value: cred.Value, ServiceUserID: userID}
	return schemes.Sid{Subject: "trusted " + cred.Masked() + " serviceUserId=" + userID, CacheKey: k.String(),
		Get: func(ctx context.Context) (string, error) {
			s, _, err := a.cache.Obtain(ctx, k, false, 0, a.cfg.RequestDeadline,
				func(ctx context.Context) (*trusted.Session, error) { return a.login(ctx, c, cred, userID) })
			if err != nil {
				return "", err
			}
			return s.Sid, nil
		},
		Drop: func() bool { return a.cache.Drop(k) }}, nil
}
