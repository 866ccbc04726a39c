package oidc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"golang.org/x/oauth2"

	"github.com/signagent/signagent/internal/httpx"
)

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
	da, err := c.deviceAuthorization(ctx, p)
	if err != nil {
		return nil, err
	}
	if da.DeviceCode == "" || da.UserCode == "" || da.VerificationURI == "" {
		return nil, &httpx.TransportError{Peer: idp, Step: "device authorization", URL: c.base.String(), Msg: "answered without a device_code, user_code or verification_uri"}
	}
	if da.Expiry.IsZero() {
		da.Expiry = time.Now().Add(30 * time.Minute)
	}
	vu, err := c.shownURI(da.VerificationURI)
	if err == nil && da.VerificationURIComplete != "" {
		da.VerificationURIComplete, err = c.shownURI(da.VerificationURIComplete)
	}
	if err != nil {
		return nil, &httpx.TransportError{Peer: idp, Step: "device authorization", URL: c.base.String(), Msg: "answered a verification address signagent will not show: " + err.Error()}
	}
	return &Device{UserCode: httpx.Printable(da.UserCode, 40), VerificationURI: vu,
		VerificationURIComplete: da.VerificationURIComplete, Interval: deviceInterval(da.Interval),
		Expiry: da.Expiry, resp: da}, nil
}

// deviceAuthorization is the request: POST /connect/deviceauthorization
// with client_id, client_secret and scope in the form body. It is this
// package's, not x/oauth2's DeviceAuth, which sends client_id and scope
// only, and sends the request without its context: neither the caller's
// deadline nor its cancel reached it.
func (c *Client) deviceAuthorization(ctx context.Context, p *provider) (*oauth2.DeviceAuthResponse, error) {
	const step = "device authorization"
	form := url.Values{"client_id": {c.cfg.ClientID}, "client_secret": {c.cfg.ClientSecret}, "scope": {strings.Join(c.scopes, " ")}}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, body, err := c.postForm(rctx, p.endpoint.DeviceAuthURL, form)
	if err != nil {
		return nil, c.classify(rctx, step, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, c.classify(rctx, step, retrieveError(resp, body))
	}
	var da oauth2.DeviceAuthResponse // its UnmarshalJSON turns expires_in into Expiry
	if json.Unmarshal(body, &da) != nil {
		return nil, &httpx.TransportError{Peer: idp, Step: step, URL: c.base.String(), Msg: "answered something that is not a device authorization (not JSON)" + bodyHint(resp, body)}
	}
	return &da, nil
}

// postForm sends form to u and reads the answer: at most MaxAnswer bytes
// (a longer one is an error wrapping httpx.ErrAnswerTooLarge), within
// ctx and the client's own timeout.
func (c *Client) postForm(ctx context.Context, u string, form url.Values) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := httpx.ReadAnswer(resp.Body, MaxAnswer)
	if err != nil {
		return nil, nil, err
	}
	return resp, body, nil
}

// retrieveError is an OAuth error answer (RFC 6749 5.2) in x/oauth2's
// type, which classify reads; its code is empty when the body is not one.
func retrieveError(resp *http.Response, body []byte) *oauth2.RetrieveError {
	var e struct {
		Error            string `json:"error"`
		ErrorDescription string `json:"error_description"`
	}
	_ = json.Unmarshal(body, &e)
	return &oauth2.RetrieveError{Response: resp, Body: body, ErrorCode: e.Error, ErrorDescription: e.ErrorDescription}
}

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
		return "", fmt.Errorf("%q is not an http(s) address", httpx.Printable(raw, 100))
	}
	if u.Scheme == "http" && !c.cfg.AllowInsecureHTTP && !httpx.IsLoopback(u.Hostname()) {
		return "", fmt.Errorf("%s is plain http to another host", httpx.Printable(u.Redacted(), 100))
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
			return c.signedIn(ctx, p, "token (device_code)", tok, "", "")
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
	resp, body, err := c.postForm(rctx, p.endpoint.TokenURL, v)
	if err != nil {
		return nil, err
	}
	var tj struct {
		AccessToken  string `json:"access_token"`
		TokenType    string `json:"token_type"`
		RefreshToken string `json:"refresh_token"`
		ExpiresIn    int64  `json:"expires_in"`
		Error        string `json:"error"`
	}
	jerr := json.Unmarshal(body, &tj)
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	switch {
	case tj.Error != "", !ok:
		return nil, retrieveError(resp, body)
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

// The device flow's poll interval: 5 s when the provider gives none (or
// zero or less), at most MaxDeviceInterval (RFC 8628 3.5 sets no ceiling;
// a provider asking for more would have the code expire between polls).
const (
	DefaultDeviceInterval = 5 * time.Second
	MaxDeviceInterval     = 5 * time.Minute
)
