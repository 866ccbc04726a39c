// Package trusted is the client of the service's trusted authentication
// (specification section 4.6): linking a user, authenticate-by-truster with
// a detached signature over the canonical text, and approve-truster, which
// yields the auth.sid.
//
// The client signs through a small Signer interface; it knows nothing of
// tokens. It retries transport failures and 5xx answers with backoff and
// jitter: step 1 with a fresh timestamp and signature each time, step 2 only
// when the request never reached the server (its Key is single-use).
package trusted

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// APIPath is where the three endpoints live below the base address.
const APIPath = "/auth/v5.16"

// Signer signs the canonical text as a detached CMS SignedData (DER), with
// signingTime set to ts. signer.CMS implements it.
type Signer interface {
	SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error)
}

// Config configures a Client.
type Config struct {
	// BaseURL is the service's base address; the endpoints are below
	// BaseURL + APIPath. https is required unless the host is a loopback
	// address or AllowInsecureHTTP is set.
	BaseURL           string
	AllowInsecureHTTP bool
	// APIKey is the partner's API key.
	APIKey string
	// Signer signs step 1's text; needed by Authenticate and Session.
	Signer Signer
	// Settings: the HTTP client, each request's time-out, the attempts of
	// a retryable request and the backoff between them, the User-Agent and
	// the clock (Now: the text's timestamp), each with its default
	// (httpx.Settings).
	httpx.Settings
	// Stamps hands out the texts' timestamps; clients that share one (the
	// agent's, across reloads) never sign the same text twice between
	// them. Default: the client's own.
	Stamps *Stamps
	Log    zerolog.Logger
}

// Client talks to the trusted-authentication endpoints.
type Client struct {
	cfg    Config
	base   *url.URL
	apiKey string
}

// New checks the configuration and returns a client.
func New(cfg Config) (*Client, error) {
	u, err := httpx.ParseBaseURL(cfg.BaseURL, cfg.AllowInsecureHTTP)
	if err != nil {
		return nil, fmt.Errorf("%w: base %w", errdefs.ErrInvalidInput, err)
	}
	key, err := canonical.NormalizeAPIKey(cfg.APIKey)
	if err != nil {
		return nil, err
	}
	cfg.Settings.Fill()
	if cfg.Stamps == nil {
		cfg.Stamps = NewStamps()
	}
	return &Client{cfg: cfg, base: u, apiKey: key}, nil
}

// Stamps is the client's timestamp memory (Config.Stamps), for a caller
// that hands out texts of the same API key (see Stamps.Handout).
func (c *Client) Stamps() *Stamps { return c.cfg.Stamps }

// IsLoopback reports whether host names this machine: localhost or a
// loopback address.
func IsLoopback(host string) bool { return httpx.IsLoopback(host) }

// Link asks the service to link the service user identified by phone to the
// trusted system's user serviceUserID (step 0).
func (c *Client) Link(ctx context.Context, serviceUserID string, phone canonical.Credential) error {
	if err := checkUserID(serviceUserID); err != nil {
		return err
	}
	if phone.Kind != canonical.Phone {
		return fmt.Errorf("%w: users are linked by phone, not by %s", errdefs.ErrInvalidInput, phone.Kind)
	}
	q := query([2]string{"api-key", c.apiKey}, [2]string{"serviceUserId", serviceUserID}, [2]string{"phone", phone.Value})
	_, _, err := c.do(ctx, StepLink, http.MethodPut, q, nil, "", retryAlways)
	return err
}

// Authenticate runs step 1: it builds the text for cred and now, signs it,
// and sends the signature. On a retry the text is built and signed again
// with a fresh timestamp.
func (c *Client) Authenticate(ctx context.Context, cred canonical.Credential, serviceUserID string) (*Challenge, error) {
	if err := checkUserID(serviceUserID); err != nil {
		return nil, err
	}
	if c.cfg.Signer == nil {
		return nil, fmt.Errorf("%w: no signer configured", errdefs.ErrInvalidInput)
	}
	var body []byte
	var q string
	var sent time.Time
	prepare := func(ctx context.Context, lastErr error) error {
		// A request the service calls a replay (another process signed the
		// same text in the same second) is signed anew with a later
		// timestamp; any other retry may resend the same request.
		var se *ServiceError
		if errors.As(lastErr, &se) && se.Reused() {
			sent = time.Time{}
		}
		// Keyed by the text without its timestamp: sessions for one
		// credential under other serviceUserIds sign the same text.
		ts, err := c.cfg.Stamps.next(ctx, c.cfg.Now, stampKey(c.apiKey, cred), cred, sent)
		if err != nil {
			return err
		}
		sent = ts
		text := canonical.Text(c.apiKey, cred, ts)
		sig, err := c.cfg.Signer.SignText(ctx, text, ts)
		if err != nil {
			return fmt.Errorf("%s: could not sign: %w", StepAuthenticate, err)
		}
		body = sig
		q = query([2]string{"apiKey", c.apiKey}, [2]string{cred.Kind.String(), cred.Value},
			[2]string{"timestamp", canonical.FormatTimestamp(ts)}, [2]string{"serviceUserId", serviceUserID})
		return nil
	}
	_, resp, err := c.doPrepared(ctx, StepAuthenticate, http.MethodPost, prepare, func() (string, []byte) { return q, body }, "application/octet-stream", retryAlways)
	if err != nil {
		return nil, err
	}
	ch, err := ParseChallenge(resp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", StepAuthenticate, err)
	}
	return ch, nil
}

// Approve runs step 2 with the Key step 1 returned and the same credential,
// and returns the auth.sid.
func (c *Client) Approve(ctx context.Context, key string, cred canonical.Credential) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty Key", errdefs.ErrInvalidInput)
	}
	q := query([2]string{"key", key}, [2]string{"id", cred.Value}, [2]string{"apiKey", c.apiKey})
	ct, resp, err := c.do(ctx, StepApprove, http.MethodPost, q, nil, "", retryUnsent)
	if err != nil {
		return "", err
	}
	sid, err := ParseSid(ct, resp)
	if err != nil {
		return "", fmt.Errorf("%s: %w", StepApprove, err)
	}
	return sid, nil
}

// Session is an auth.sid and when it was obtained.
type Session struct {
	Sid        string
	Kind       canonical.Kind
	ObtainedAt time.Time
}

// Session runs steps 1 and 2 and returns the auth.sid. When step 2 finds
// step 1's Key spent or expired (ServiceError.KeyLost: another process
// signed the same text in the same second, as agents sharing an API key
// do when their shared store is down, and confirmed it first), it starts
// again from step 1 once: a new text, a later second, a Key of its own.
func (c *Client) Session(ctx context.Context, cred canonical.Credential, serviceUserID string) (*Session, error) {
	for again := false; ; again = true {
		ch, err := c.Authenticate(ctx, cred, serviceUserID)
		if err != nil {
			return nil, err
		}
		sid, err := c.Approve(ctx, ch.Key, cred)
		var se *ServiceError
		if err != nil && !again && errors.As(err, &se) && se.KeyLost() {
			c.cfg.Log.Warn().Str("step", string(StepApprove)).Str("code", se.Code).Msg("step 1's key was spent or expired; starting again from step 1")
			continue
		}
		if err != nil {
			return nil, err
		}
		return &Session{Sid: sid, Kind: cred.Kind, ObtainedAt: c.cfg.Now().UTC()}, nil
	}
}

func checkUserID(id string) error { return CheckServiceUserID(id) }

// MaxServiceUserID is the longest trusted-system user id accepted: ids are
// short (a number, a login, a GUID); a longer one is a mistake or an
// attempt to fill logs.
const MaxServiceUserID = 256

// CheckServiceUserID checks a trusted-system user id (serviceUserId) as
// the credential is checked: not empty, at most MaxServiceUserID bytes of
// valid UTF-8, no control characters (it is written to the audit log and
// sent in a query). The error does not repeat the value.
func CheckServiceUserID(id string) error {
	switch {
	case strings.TrimSpace(id) == "":
		return fmt.Errorf("%w: the trusted-system user id (serviceUserId) is empty", errdefs.ErrInvalidInput)
	case len(id) > MaxServiceUserID:
		return fmt.Errorf("%w: the trusted-system user id (serviceUserId) is longer than %d bytes", errdefs.ErrInvalidInput, MaxServiceUserID)
	case !utf8.ValidString(id) || strings.ContainsFunc(id, unicode.IsControl):
		return fmt.Errorf("%w: the trusted-system user id (serviceUserId) holds control characters or is not UTF-8", errdefs.ErrInvalidInput)
	}
	return nil
}

// retryPolicy says which failures may be tried again.
type retryPolicy int

const (
	retryAlways retryPolicy = iota // transport errors and 5xx
	retryUnsent                    // only requests that never reached the server
)

func (c *Client) do(ctx context.Context, step Step, method, q string, body []byte, ctype string, policy retryPolicy) (string, []byte, error) {
	return c.doPrepared(ctx, step, method, nil, func() (string, []byte) { return q, body }, ctype, policy)
}

// doPrepared sends a request, calling prepare (when not nil) before every
// attempt so that each attempt can carry fresh content.
func (c *Client) doPrepared(ctx context.Context, step Step, method string, prepare func(context.Context, error) error,
	request func() (string, []byte), ctype string, policy retryPolicy) (string, []byte, error) {
	var lastErr error
	var ct string
	var resp []byte
	err := httpx.Retry(ctx, c.cfg.Attempts, c.cfg.Backoff,
		func(attempt int, d time.Duration, err error) {
			c.cfg.Log.Warn().Str("step", string(step)).Int("attempt", attempt).Stringer("wait", d).Err(err).Msg("request failed; retrying")
		},
		func(int) (bool, time.Duration, error) {
			if prepare != nil {
				if err := prepare(ctx, lastErr); err != nil {
					return false, 0, err
				}
			}
			q, body := request()
			var sent bool
			var err error
			ct, resp, sent, err = c.once(ctx, step, method, q, body, ctype)
			if err == nil {
				return false, 0, nil
			}
			lastErr = err
			var se *ServiceError
			var asked time.Duration
			if errors.As(err, &se) {
				asked = se.RetryAfter
			}
			return c.retryable(err, sent, policy), asked, err
		})
	if err != nil {
		return "", nil, err
	}
	return ct, resp, nil
}

func (c *Client) retryable(err error, sent bool, policy retryPolicy) bool {
	var se *ServiceError
	var te *httpx.TransportError
	switch {
	case policy == retryUnsent:
		return errors.As(err, &te) && !sent
	case errors.As(err, &se):
		return se.Temporary() || se.Reused()
	case errors.As(err, &te):
		return true
	}
	return false
}

// once sends one request. sent reports whether the request was written to
// the connection (so the server may have acted on it).
func (c *Client) once(ctx context.Context, step Step, method, q string, body []byte, ctype string) (string, []byte, bool, error) {
	u := *c.base
	u.Path = c.base.Path + APIPath + "/" + string(step)
	u.RawQuery = q
	masked := MaskURL(&u)

	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var sent bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { sent = true },
	})
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return "", nil, false, fmt.Errorf("%s: could not build the request for %s", step, masked)
	}
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	req.Header.Set("Accept", "application/json")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	start := time.Now()
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return "", nil, sent, &httpx.TransportError{Step: string(step), URL: masked, Timeout: httpx.IsTimeout(ctx, err), Err: httpx.CleanErr(err)}
	}
	defer resp.Body.Close()
	data, err := httpx.ReadAnswer(resp.Body, maxBody)
	tooLarge := errors.Is(err, httpx.ErrAnswerTooLarge)
	if err != nil && !tooLarge {
		return "", nil, true, &httpx.TransportError{Step: string(step), URL: masked, Timeout: httpx.IsTimeout(ctx, err), Err: httpx.CleanErr(err)}
	}
	ev := c.cfg.Log.Debug()
	if resp.StatusCode >= 300 {
		ev = c.cfg.Log.Info()
	}
	ev.Str("step", string(step)).Str("url", masked).Int("status", resp.StatusCode).Dur("latency", time.Since(start)).Msg("service answered")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ra, _ := httpx.RetryAfter(resp.Header, time.Now())
		se := &ServiceError{Step: step, Status: resp.StatusCode, Code: ParseErrorCode(data), URL: masked, RetryAfter: ra}
		se.Skew, se.HasSkew = httpx.ClockSkew(resp.Header, start)
		return "", nil, true, se
	}
	if tooLarge {
		return "", nil, true, fmt.Errorf("%s: %s: %w", step, masked, err)
	}
	return resp.Header.Get("Content-Type"), data, true, nil
}

// CheckAPIKey asks the service whether it accepts the API key, changing
// nothing: step 1 with the key alone (no credential, timestamp or
// signature), which the service refuses InvalidApiKey (401, 403) for a key
// it does not accept and 400 (parameters missing) for one it does. Sent
// once, not retried. nil: accepted; a *ServiceError: refused or failing;
// else the service could not be reached or told nothing.
func (c *Client) CheckAPIKey(ctx context.Context) error {
	_, _, err := c.do(ctx, StepAuthenticate, http.MethodPost, query([2]string{"apiKey", c.apiKey}), nil, "", retryUnsent)
	var se *ServiceError
	switch {
	case err == nil:
		return fmt.Errorf("%s: the service answered a request without a credential with success; whether it accepts the API key cannot be told", StepAuthenticate)
	case errors.As(err, &se) && se.Status == http.StatusBadRequest && se.Code != CodeInvalidAPIKey:
		return nil
	}
	return err
}
