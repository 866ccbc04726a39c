package oidc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// provider is what discovery (or the specification's fixed paths) gives.
type provider struct {
	issuer     string
	endpoint   oauth2.Endpoint
	userinfo   string
	revocation string // RFC 7009's endpoint, when discovery publishes one
	verifier   *gooidc.IDTokenVerifier
	discovered bool
}

// Fixed paths of the specification, used when the provider publishes no
// discovery document.
const (
	pathDiscovery = "/.well-known/openid-configuration"
	pathJWKS      = "/.well-known/openid-configuration/jwks"
	pathAuthorize = "/connect/authorize"
	pathToken     = "/connect/token"
	pathDevice    = "/connect/deviceauthorization"
	pathUserinfo  = "/connect/userinfo"
)

// discover reads the discovery document; a 404 (or 405/410) means the
// provider has none and the /connect/* paths are used.
func (c *Client) discover(ctx context.Context) (*provider, error) {
	base := c.base.String()
	pc := gooidc.ProviderConfig{IssuerURL: base, AuthURL: base + pathAuthorize, TokenURL: base + pathToken,
		DeviceAuthURL: base + pathDevice, UserInfoURL: base + pathUserinfo, JWKSURL: base + pathJWKS,
		Algorithms: []string{gooidc.RS256}}
	var revocation string
	discovered, err := c.fetchDiscovery(ctx, &pc, &revocation)
	if err != nil {
		return nil, err
	}
	if !discovered {
		c.cfg.Log.Debug().Str("authUrl", base).Msg("the identity provider has no discovery document; using the /connect/* paths")
	}
	if strings.TrimRight(pc.IssuerURL, "/") != base {
		return nil, fmt.Errorf("%w: the provider at %s names its issuer %q; give that as --oidc-url", errdefs.ErrInvalidInput, base, httpx.Printable(pc.IssuerURL, 100))
	}
	for _, u := range []string{pc.AuthURL, pc.TokenURL, pc.JWKSURL, revocation} {
		if u == "" {
			continue // no revocation endpoint
		}
		if _, err := httpx.ParseBaseURL(u, c.cfg.AllowInsecureHTTP); err != nil {
			return nil, &httpx.TransportError{Peer: idp, Step: "discovery", URL: base, Msg: "published an endpoint signagent will not use: " + err.Error()}
		}
	}
	if pc.DeviceAuthURL == "" {
		pc.DeviceAuthURL = base + pathDevice
	}
	// The key set fetches keys on its own; it must outlive this call.
	kctx := gooidc.ClientContext(context.WithoutCancel(ctx), c.http)
	p := pc.NewProvider(kctx)
	vcfg := &gooidc.Config{ClientID: c.cfg.ClientID, SupportedSigningAlgs: []string{gooidc.RS256}, Now: c.cfg.Now}
	ep := p.Endpoint()
	ep.AuthStyle = oauth2.AuthStyleInParams // once, in the form body, as the specification lists them
	return &provider{issuer: base, endpoint: ep, userinfo: pc.UserInfoURL, revocation: revocation,
		verifier: p.VerifierContext(kctx, vcfg), discovered: discovered}, nil
}

func (c *Client) fetchDiscovery(ctx context.Context, pc *gooidc.ProviderConfig, revocation *string) (bool, error) {
	u := c.base.String() + pathDiscovery
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return false, transportErr(ctx, "discovery", c.base.String(), err)
	}
	defer resp.Body.Close()
	body, err := httpx.ReadAnswer(resp.Body, MaxAnswer)
	tooLarge := errors.Is(err, httpx.ErrAnswerTooLarge)
	if err != nil && !tooLarge {
		return false, transportErr(ctx, "discovery", c.base.String(), err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusGone:
		return false, nil
	case resp.StatusCode != http.StatusOK:
		return false, &httpx.TransportError{Peer: idp, Step: "discovery", URL: c.base.String(), Msg: fmt.Sprintf("answered HTTP %d%s", resp.StatusCode, bodyHint(resp, body))}
	case tooLarge:
		return false, tooLargeErr("discovery", c.base.String(), err)
	}
	var extra struct {
		Revocation string `json:"revocation_endpoint"`
	}
	if json.Unmarshal(body, pc) != nil || json.Unmarshal(body, &extra) != nil {
		return false, &httpx.TransportError{Peer: idp, Step: "discovery", URL: c.base.String(), Msg: "answered something that is not a discovery document" + bodyHint(resp, body)}
	}
	*revocation = extra.Revocation
	return true, nil
}

// transportErr describes a request that got no answer.
func transportErr(ctx context.Context, step, u string, err error) error {
	if httpx.IsTimeout(ctx, err) {
		return &httpx.TransportError{Peer: idp, Step: step, URL: u, Msg: "did not answer in time", Err: err}
	}
	if ctx.Err() == context.Canceled {
		return ctx.Err()
	}
	var he *httpx.HeadError
	if errors.As(err, &he) {
		return &httpx.TransportError{Peer: idp, Step: step, URL: u, Msg: "answered " + he.Error(), Err: err}
	}
	return &httpx.TransportError{Peer: idp, Step: step, URL: u, Msg: "could not be reached: " + httpx.CleanErr(err).Error(), Err: err}
}

// tooLargeErr is an answer longer than MaxAnswer, refused.
func tooLargeErr(step, u string, err error) error {
	return &httpx.TransportError{Peer: idp, Step: step, URL: u, Msg: "answered: " + err.Error(), Err: err}
}

// bodyHint says what a non-OAuth answer was, without quoting it.
func bodyHint(resp *http.Response, body []byte) string {
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case ct == "text/html" || strings.HasPrefix(strings.TrimSpace(strings.ToLower(string(body))), "<!doctype html") ||
		strings.HasPrefix(strings.TrimSpace(strings.ToLower(string(body))), "<html"):
		return " (an HTML page)"
	case len(body) == 0:
		return " (empty)"
	}
	return ""
}

// classify turns what x/oauth2 returns into this package's errors.
func (c *Client) classify(ctx context.Context, step string, err error) error {
	if err == nil {
		return nil
	}
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		if re.ErrorCode == "" {
			msg := fmt.Sprintf("answered HTTP %d", status)
			if re.Response != nil {
				msg += bodyHint(re.Response, re.Body)
			}
			return &httpx.TransportError{Peer: idp, Step: step, URL: c.base.String(), Msg: msg}
		}
		pe := &ProviderError{Step: step, Status: status, Code: httpx.Printable(re.ErrorCode, 40), Description: httpx.Printable(re.ErrorDescription, 200)}
		switch re.ErrorCode {
		case "access_denied":
			pe.kind = ErrDenied
		case "expired_token":
			pe.kind = ErrExpired
		case "invalid_grant":
			if strings.HasPrefix(step, "refresh") {
				pe.kind = ErrSignIn
			}
		}
		return pe
	}
	if errors.Is(err, httpx.ErrAnswerTooLarge) {
		return tooLargeErr(step, c.base.String(), err)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return transportErr(ctx, step, c.base.String(), err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return transportErr(ctx, step, c.base.String(), err)
	}
	// x/oauth2's "cannot parse json", "server response missing access_token".
	return &httpx.TransportError{Peer: idp, Step: step, URL: c.base.String(), Msg: "answered something that is not a token response", Err: err}
}
