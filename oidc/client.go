package oidc

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// Client talks to one identity provider as one registered application.
type Client struct {
	cfg    Config
	base   *url.URL
	http   *http.Client
	scopes []string

	mu sync.Mutex
	p  *provider // discovered on first use
}

// MaxAnswer is the most signagent reads of any answer of the identity
// provider (discovery, key set, token, device authorization, userinfo).
const MaxAnswer = 1 << 20

// New checks cfg; it does not contact the provider (that happens on the
// first sign-in or refresh).
func New(cfg Config) (*Client, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	base, _ := httpx.ParseBaseURL(cfg.AuthURL, cfg.AllowInsecureHTTP)
	scopes, _ := cfg.Scopes()
	hc := httpx.Client(cfg.HTTPClient)
	// Every answer of the provider is read with a limit, also those that
	// go-oidc (the key set) and x/oauth2 read on their own.
	hc.Transport = httpx.LimitBodies(hc.Transport, MaxAnswer)
	// And within the timeout, body included: go-oidc fetches the key set
	// with a request that carries no deadline (its context outlives the
	// call that started it), and every id_token check waits on that one
	// fetch while it lasts.
	if hc.Timeout <= 0 || hc.Timeout > cfg.Timeout {
		hc.Timeout = cfg.Timeout
	}
	return &Client{cfg: cfg, base: base, http: hc, scopes: scopes}, nil
}

// AuthURL is the provider's address as the client uses it.
func (c *Client) AuthURL() string { return c.base.String() }

// ClientID is the application's client_id.
func (c *Client) ClientID() string { return c.cfg.ClientID }

func (c *Client) provider(ctx context.Context) (*provider, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p != nil {
		return c.p, nil
	}
	p, err := c.discover(ctx)
	if err != nil {
		return nil, err
	}
	c.p = p
	return p, nil
}

func (c *Client) oauth(p *provider) *oauth2.Config {
	return &oauth2.Config{ClientID: c.cfg.ClientID, ClientSecret: c.cfg.ClientSecret, Endpoint: p.endpoint,
		RedirectURL: c.cfg.RedirectURI, Scopes: c.scopes}
}

// ctx carries the HTTP client to x/oauth2.
func (c *Client) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, c.http)
}

// Refresh exchanges rec's refresh token. The newest refresh token the
// provider returns is kept, the old one when it returns none. A refused
// refresh token wraps ErrSignIn.
func (c *Client) Refresh(ctx context.Context, rec *Record) (*Record, error) {
	if rec.RefreshToken == "" {
		return nil, fmt.Errorf("%w: the access token of profile %q expired and there is no refresh token (offline_access was not granted)", ErrSignIn, rec.Profile)
	}
	p, err := c.provider(ctx)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	tok, err := c.oauth(p).TokenSource(c.ctx(rctx), &oauth2.Token{RefreshToken: rec.RefreshToken}).Token()
	if err != nil {
		return nil, c.classify(rctx, "refresh", err)
	}
	if err := c.checkAnswer("refresh", tok.AccessToken, tok.Type()); err != nil {
		return nil, err
	}
	out := *rec
	out.AccessToken, out.TokenType, out.Expiry = tok.AccessToken, tok.Type(), c.expiry(tok)
	if tok.RefreshToken != "" {
		out.RefreshToken = tok.RefreshToken
	}
	out.RefreshedAt = c.cfg.Now().UTC()
	if raw, _ := tok.Extra("id_token").(string); raw != "" {
		idt, err := c.verify(rctx, p, raw)
		if err != nil {
			return nil, err
		}
		if idt.Nonce != "" && idt.Nonce != rec.Nonce {
			return nil, fmt.Errorf("%w: the refreshed id_token carries another nonce", ErrIDToken)
		}
		if idt.Subject != rec.Subject {
			return nil, fmt.Errorf("%w: the refreshed id_token names another user", ErrIDToken)
		}
	}
	if s, _ := tok.Extra("scope").(string); s != "" {
		out.Scopes = strings.Fields(s)
	}
	return &out, nil
}

// SignInWithRefreshToken makes a record from a refresh token issued
// beforehand (a robot's start, without a person at a browser): one refresh
// grant checks it, and the id_token that comes back (which must be valid)
// names the user. The refresh token the provider returns is kept; the one
// given is spent when the provider rotates them.
func (c *Client) SignInWithRefreshToken(ctx context.Context, refreshToken string) (*Record, error) {
	if strings.TrimSpace(refreshToken) == "" {
		return nil, fmt.Errorf("%w: the refresh token file is empty", errdefs.ErrInvalidInput)
	}
	p, err := c.provider(ctx)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	tok, err := c.oauth(p).TokenSource(c.ctx(rctx), &oauth2.Token{RefreshToken: refreshToken}).Token()
	if err != nil {
		return nil, c.classify(rctx, "refresh", err)
	}
	if tok.RefreshToken == "" {
		tok.RefreshToken = refreshToken // the provider does not rotate them
	}
	return c.signedIn(rctx, p, "refresh", tok, anyNonce, "")
}

// anyNonce accepts the id_token's nonce, whatever it is: a refresh
// started from a given refresh token did not send one.
const anyNonce = "\x00any"

// signedIn checks the token answer of a new sign-in (step names its
// grant), verifies its id_token and makes the record.
func (c *Client) signedIn(ctx context.Context, p *provider, step string, tok *oauth2.Token, nonce, redirectScope string) (*Record, error) {
	if err := c.checkAnswer(step, tok.AccessToken, tok.Type()); err != nil {
		return nil, err
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, fmt.Errorf("%w: the token response carries none (was openid granted?)", ErrIDToken)
	}
	idt, err := c.verify(ctx, p, raw)
	if err != nil {
		return nil, err
	}
	if nonce == anyNonce {
		nonce = idt.Nonce
	}
	if idt.Nonce != nonce {
		return nil, fmt.Errorf("%w: its nonce is not the one this sign-in sent", ErrIDToken)
	}
	var claims struct {
		Email string `json:"email"`
		Name  string `json:"name"`
	}
	_ = idt.Claims(&claims)
	scopes := c.scopes
	if s, _ := tok.Extra("scope").(string); s != "" {
		scopes = strings.Fields(s)
	} else if redirectScope != "" {
		scopes = strings.Fields(redirectScope)
	}
	now := c.cfg.Now().UTC()
	return &Record{Version: recordVersion, AuthURL: c.base.String(), ClientID: c.cfg.ClientID,
		Subject: idt.Subject, Email: httpx.Printable(claims.Email, 200), Name: httpx.Printable(claims.Name, 200), Scopes: scopes,
		AccessToken: tok.AccessToken, TokenType: tok.Type(), Expiry: c.expiry(tok), RefreshToken: tok.RefreshToken,
		Nonce: nonce, SignedInAt: now}, nil
}

// expiry is the access token's expiry by the configured clock (x/oauth2
// computes it from time.Now).
func (c *Client) expiry(tok *oauth2.Token) time.Time {
	if tok.ExpiresIn > 0 {
		return c.cfg.Now().UTC().Add(time.Duration(tok.ExpiresIn) * time.Second)
	}
	if !tok.Expiry.IsZero() {
		return tok.Expiry.UTC()
	}
	return c.cfg.Now().UTC().Add(time.Hour) // no expires_in: assume an hour
}

func (c *Client) verify(ctx context.Context, p *provider, raw string) (*gooidc.IDToken, error) {
	idt, err := p.verifier.Verify(ctx, raw)
	if err != nil {
		var te *gooidc.TokenExpiredError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%w: it expired at %s", ErrIDToken, te.Expiry.UTC().Format(time.RFC3339))
		}
		return nil, fmt.Errorf("%w: %s", ErrIDToken, httpx.Printable(strings.TrimPrefix(err.Error(), "oidc: "), 200))
	}
	return idt, nil
}

func random() string {
	b := make([]byte, 24)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Revoke asks the provider to revoke rec's refresh token (RFC 7009), as
// oidc-agent does on sign-out, so that a copy of it is worth nothing. It
// is false, with no error, when the provider publishes no revocation
// endpoint or the record has no refresh token.
func (c *Client) Revoke(ctx context.Context, rec *Record) (bool, error) {
	if rec.RefreshToken == "" {
		return false, nil
	}
	p, err := c.provider(ctx)
	if err != nil || p.revocation == "" {
		return false, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	form := url.Values{"token": {rec.RefreshToken}, "token_type_hint": {"refresh_token"}, "client_id": {c.cfg.ClientID}}
	if c.cfg.ClientSecret != "" {
		form.Set("client_secret", c.cfg.ClientSecret)
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, p.revocation, strings.NewReader(form.Encode()))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.http.Do(req)
	if err != nil {
		return false, transportErr(rctx, "revocation", p.revocation, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Read for the hint only (an HTML page?): the status says it.
		body, _ := httpx.ReadAnswer(resp.Body, MaxAnswer)
		return false, &httpx.TransportError{Peer: idp, Step: "revocation", URL: p.revocation, Msg: fmt.Sprintf("answered HTTP %d%s", resp.StatusCode, bodyHint(resp, body))}
	}
	// 200 is the answer; its body means nothing (RFC 7009 2.2).
	return true, nil
}

// Discover reads the provider's discovery document (or settles on the
// specification's fixed paths when it publishes none), as the first call
// would: a check that the address is an identity provider's.
func (c *Client) Discover(ctx context.Context) (discovered bool, err error) {
	p, err := c.provider(ctx)
	if err != nil {
		return false, err
	}
	return p.discovered, nil
}
