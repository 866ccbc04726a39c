package oidc

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

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

// Device is a started device authorization.
type Device struct {
	UserCode                string
	VerificationURI         string
	VerificationURIComplete string
	Interval                time.Duration
	Expiry                  time.Time
	resp                    *oauth2.DeviceAuthResponse
}

// StartDevice asks for a device code (POST /connect/deviceauthorization
// with client_id, client_secret and scope).
func (c *Client) StartDevice(ctx context.Context) (*Device, error) {
	p, err := c.provider(ctx)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	// x/oauth2 sends client_id and scope only; the provider wants the
	// secret too.
	da, err := c.oauth(p).DeviceAuth(c.ctx(rctx), oauth2.SetAuthURLParam("client_secret", c.cfg.ClientSecret))
	if err != nil {
		if strings.HasPrefix(err.Error(), "unmarshal ") {
			return nil, &TransportError{Step: "device authorization", URL: c.base.String(), Msg: "answered something that is not a device authorization (not JSON)"}
		}
		return nil, c.classify(rctx, "device authorization", err)
	}
	if da.DeviceCode == "" || da.UserCode == "" || da.VerificationURI == "" {
		return nil, &TransportError{Step: "device authorization", URL: c.base.String(), Msg: "answered without a device_code, user_code or verification_uri"}
	}
	if da.Expiry.IsZero() {
		da.Expiry = time.Now().Add(30 * time.Minute)
	}
	vu, err := c.shownURI(da.VerificationURI)
	if err == nil && da.VerificationURIComplete != "" {
		da.VerificationURIComplete, err = c.shownURI(da.VerificationURIComplete)
	}
	if err != nil {
		return nil, &TransportError{Step: "device authorization", URL: c.base.String(), Msg: "answered a verification address signagent will not show: " + err.Error()}
	}
	return &Device{UserCode: printable(da.UserCode, 40), VerificationURI: vu,
		VerificationURIComplete: da.VerificationURIComplete, Interval: deviceInterval(da.Interval),
		Expiry: da.Expiry, resp: da}, nil
}

// The device flow's poll interval: 5 s when the provider gives none (or
// zero or less), at most MaxDeviceInterval (RFC 8628 3.5 sets no ceiling;
// a provider asking for more would have the code expire between polls).
const (
	DefaultDeviceInterval = 5 * time.Second
	MaxDeviceInterval     = 5 * time.Minute
)

// deviceInterval turns the provider's interval in seconds into a wait,
// without overflow: 10^10 seconds is MaxDeviceInterval, not a negative
// duration that fires at once.
func deviceInterval(seconds int64) time.Duration {
	switch {
	case seconds <= 0:
		return DefaultDeviceInterval
	case seconds >= int64(MaxDeviceInterval/time.Second):
		return MaxDeviceInterval
	}
	return time.Duration(seconds) * time.Second
}

// shownURI checks an address the provider asks the user to open: an
// absolute http(s) URL with a host (https unless the provider's own
// address may be plain http), without control or format characters, which
// could rewrite the user's terminal. It returns the address as printed.
func (c *Client) shownURI(raw string) (string, error) {
	if strings.ContainsFunc(raw, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) {
		return "", errors.New("it holds control characters")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil {
		return "", fmt.Errorf("%q is not an http(s) address", printable(raw, 100))
	}
	if u.Scheme == "http" && !c.cfg.AllowInsecureHTTP && !httpx.IsLoopback(u.Hostname()) {
		return "", fmt.Errorf("%s is plain http to another host", printable(u.Redacted(), 100))
	}
	return u.String(), nil
}

// PollDevice waits for the user's approval: the first poll after the
// interval, authorization_pending keeps polling, slow_down adds 5 seconds,
// until the device code's expiry. access_denied wraps ErrDenied and an
// expired code ErrExpired; a cancelled ctx returns ctx's error.
//
// The loop is this package's, not x/oauth2's DeviceAccessToken: that one
// polls on a fixed ticker, so a poll whose request travelled faster than
// the previous one reaches the provider less than interval after it, and
// a provider that restarts its clock at each poll (this one) answers
// slow_down. Here each wait starts when the previous answer arrived.
func (c *Client) PollDevice(ctx context.Context, d *Device) (*Record, error) {
	p, err := c.provider(ctx)
	if err != nil {
		return nil, err
	}
	wait, cancel := context.WithDeadline(ctx, d.Expiry)
	defer cancel()
	expired := &ProviderError{Step: "token (device_code)", Code: "expired_token", kind: ErrExpired}
	interval := d.Interval
	for {
		t := time.NewTimer(interval)
		select {
		case <-wait.Done():
			t.Stop()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, expired
		case <-t.C:
		}
		tok, err := c.deviceToken(wait, p, d)
		if err == nil {
			return c.signedIn(ctx, p, tok, "", "")
		}
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			switch re.ErrorCode {
			case "authorization_pending":
				continue
			case "slow_down":
				interval = min(interval+5*time.Second, MaxDeviceInterval) // RFC 8628 3.5, for this and every later poll
				continue
			}
		}
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case wait.Err() != nil:
			return nil, expired
		}
		return nil, c.classify(wait, "token (device_code)", err)
	}
}

// deviceToken is one poll: POST /connect/token with the device_code grant
// and client_id, client_secret and scope in the form body (specification
// 4.2). Its answer is read into x/oauth2's types, which the rest of the
// package handles.
func (c *Client) deviceToken(ctx context.Context, p *provider, d *Device) (*oauth2.Token, error) {
	v := url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {d.resp.DeviceCode},
		"client_id": {c.cfg.ClientID}, "client_secret": {c.cfg.ClientSecret}, "scope": {strings.Join(c.scopes, " ")}}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, p.endpoint.TokenURL, strings.NewReader(v.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer))
	if err != nil {
		return nil, err
	}
	var tj struct {
		AccessToken      string `json:"access_token"`
		TokenType        string `json:"token_type"`
		RefreshToken     string `json:"refresh_token"`
		ExpiresIn        int64  `json:"expires_in"`
		Error            string `json:"error"`
		ErrorDescription string `json:"error_description"`
	}
	jerr := json.Unmarshal(body, &tj)
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	switch {
	case jerr != nil && !ok, tj.Error != "", !ok:
		return nil, &oauth2.RetrieveError{Response: resp, Body: body, ErrorCode: tj.Error, ErrorDescription: tj.ErrorDescription}
	case jerr != nil:
		return nil, fmt.Errorf("oauth2: cannot parse json: %w", jerr)
	case tj.AccessToken == "":
		return nil, errors.New("oauth2: server response missing access_token")
	}
	var raw map[string]any
	_ = json.Unmarshal(body, &raw)
	tok := &oauth2.Token{AccessToken: tj.AccessToken, TokenType: tj.TokenType, RefreshToken: tj.RefreshToken, ExpiresIn: tj.ExpiresIn}
	return tok.WithExtra(raw), nil
}

// CodeRequest is one authorization-code sign-in: the URL to open and what
// the redirect must match.
type CodeRequest struct {
	URL      string
	state    string
	nonce    string
	verifier string
}

// StartCode makes the authorization URL with a fresh state, nonce and
// PKCE S256 challenge.
func (c *Client) StartCode(ctx context.Context) (*CodeRequest, error) {
	if c.cfg.RedirectURI == "" {
		return nil, fmt.Errorf("%w: the code flow needs --redirect-uri (the address registered in the integrator's cabinet)", ErrInvalidInput)
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
		pe := &ProviderError{Step: "authorization", Code: printable(e, 40), Description: printable(q.Get("error_description"), 200)}
		if e == "access_denied" {
			pe.kind = ErrDenied
		}
		return nil, pe
	}
	if q.Get("state") != r.state {
		return nil, fmt.Errorf("%w: it was not sent by this sign-in (or was tampered with); start signagent login again", ErrState)
	}
	code := q.Get("code")
	if code == "" {
		return nil, fmt.Errorf("%w: the redirect carries no code", ErrInvalidInput)
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
	rec, err := c.signedIn(ctx, p, tok, r.nonce, q.Get("scope"))
	return rec, err
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
		return nil, fmt.Errorf("%w: the refresh token file is empty", ErrInvalidInput)
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
	return c.signedIn(rctx, p, tok, anyNonce, "")
}

// anyNonce accepts the id_token's nonce, whatever it is: a refresh
// started from a given refresh token did not send one.
const anyNonce = "\x00any"

// signedIn verifies the id_token of a new sign-in and makes the record.
func (c *Client) signedIn(ctx context.Context, p *provider, tok *oauth2.Token, nonce, redirectScope string) (*Record, error) {
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
		Subject: idt.Subject, Email: printable(claims.Email, 200), Name: printable(claims.Name, 200), Scopes: scopes,
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
		return nil, fmt.Errorf("%w: %s", ErrIDToken, printable(strings.TrimPrefix(err.Error(), "oidc: "), 200))
	}
	return idt, nil
}

func random() string {
	b := make([]byte, 24)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
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
		return &TransportError{Step: "authorization", URL: c.base.String(), Msg: fmt.Sprintf("answered HTTP %d", resp.StatusCode)}
	case resp.StatusCode >= 400:
		return &ProviderError{Step: "authorization", Status: resp.StatusCode,
			Description: fmt.Sprintf("it refuses the sign-in request; is client %q known there and --redirect-uri %s registered for it?", c.cfg.ClientID, c.cfg.RedirectURI)}
	}
	return nil
}
