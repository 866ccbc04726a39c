package oidc

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
	"golang.org/x/oauth2"
)

// CodeRequest is one authorization-code sign-in: the URL to open and what
// the redirect must match.
type CodeRequest struct {
	URL      string
	state    string
	nonce    string
	verifier string
}

// State is the state the sign-in sent: the redirect it takes must carry
// it (redirect.Listen).
func (r *CodeRequest) State() string { return r.state }

// StartCode makes the authorization URL with a fresh state, nonce and
// PKCE S256 challenge.
func (c *Client) StartCode(ctx context.Context) (*CodeRequest, error) {
	if c.cfg.RedirectURI == "" {
		return nil, fmt.Errorf("%w: the code flow needs --redirect-uri (the address registered in the integrator's cabinet)", errdefs.ErrInvalidInput)
	}
	p, err := c.provider(ctx)
	if err != nil {
		return nil, err
	}
	r := &CodeRequest{state: random(), nonce: random(), verifier: oauth2.GenerateVerifier()}
	r.URL = c.oauth(p).AuthCodeURL(r.state, gooidc.Nonce(r.nonce), oauth2.S256ChallengeOption(r.verifier))
	return r, nil
}

// FinishCode checks the redirect's parameters (error, state) and exchanges
// the code with client_id, client_secret, redirect_uri and the PKCE
// verifier; the id_token must carry the nonce sent.
func (c *Client) FinishCode(ctx context.Context, r *CodeRequest, q url.Values) (*Record, error) {
	if e := q.Get("error"); e != "" {
		pe := &ProviderError{Step: "authorization", Code: httpx.Printable(e, 40), Description: httpx.Printable(q.Get("error_description"), 200)}
		if e == "access_denied" {
			pe.kind = ErrDenied
		}
		return nil, pe
	}
	if q.Get("state") != r.state {
		return nil, fmt.Errorf("%w: it was not sent by this sign-in (or was tampered with); start signagent oidc login again", ErrState)
	}
	code := q.Get("code")
	if code == "" {
		return nil, fmt.Errorf("%w: the redirect carries no code", errdefs.ErrInvalidInput)
	}
	p, err := c.provider(ctx)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	tok, err := c.oauth(p).Exchange(c.ctx(rctx), code, oauth2.VerifierOption(r.verifier))
	if err != nil {
		return nil, c.classify(rctx, "token (authorization_code)", err)
	}
	rec, err := c.signedIn(ctx, p, "token (authorization_code)", tok, r.nonce, q.Get("scope"))
	return rec, err
}

// CheckCode asks the provider for the authorization page before the user
// is sent there: a client or redirect_uri it does not know is shown as an
// error page the user would be left looking at; this says it here.
func (c *Client) CheckCode(ctx context.Context, r *CodeRequest) error {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, r.URL, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return transportErr(rctx, "authorization", c.base.String(), err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return &httpx.TransportError{Peer: idp, Step: "authorization", URL: c.base.String(), Msg: fmt.Sprintf("answered HTTP %d", resp.StatusCode)}
	case resp.StatusCode >= 400:
		return &ProviderError{Step: "authorization", Status: resp.StatusCode,
			Description: fmt.Sprintf("it refuses the sign-in request; is client %q known there and --redirect-uri %s registered for it?", c.cfg.ClientID, c.cfg.RedirectURI)}
	}
	return nil
}
