package oidc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	return &Device{UserCode: httpx.Printable(da.UserCode, 40), VerificationURI: vu,
		VerificationURIComplete: da.VerificationURIComplete, Interval: deviceInterval(da.Interval),
		Expiry: da.Expiry, resp: da}, nil
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

// The device flow's poll interval: 5 s when the provider gives none (or
// zero or less), at most MaxDeviceInterval (RFC 8628 3.5 sets no ceiling;
// a provider asking for more would have the code expire between polls).
const (
	DefaultDeviceInterval = 5 * time.Second
	MaxDeviceInterval     = 5 * time.Minute
)
