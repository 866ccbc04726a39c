// Package business calls the service's business methods with the
// Authorization header of any scheme (an authz.Authorizer): typed
// GetMyOrganizations and GetMyEmployee, and a raw call for any other
// method. On a 401 it asks the authorizer for a fresh value once and
// tries once more (authz.Do).
package business

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// ErrorCodeHeader carries the service's error code; the body is text.
const ErrorCodeHeader = "X-Service-ErrorCode"

// Config says where the business API is.
type Config struct {
	APIURL            string // {base_url}; methods are below it
	AllowInsecureHTTP bool
	HTTPClient        *http.Client
	Timeout           time.Duration // one request (default 30s)
	MaxBody           int64         // largest answer read (default 16 MiB)
	UserAgent         string
}

// Client calls business methods for one identity.
type Client struct {
	cfg  Config
	base *url.URL
	http *http.Client
	auth authz.Authorizer
}

// New checks cfg; a is the identity's authorizer.
func New(cfg Config, a authz.Authorizer) (*Client, error) {
	if strings.TrimSpace(cfg.APIURL) == "" {
		return nil, fmt.Errorf("%w: give the business API address with --business-url or SIGNAGENT_BUSINESS_URL", errdefs.ErrInvalidInput)
	}
	base, err := httpx.ParseBaseURL(cfg.APIURL, cfg.AllowInsecureHTTP)
	if err != nil {
		return nil, fmt.Errorf("%w: --business-url: %w", errdefs.ErrInvalidInput, err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 16 << 20
	}
	return &Client{cfg: cfg, base: base, http: httpx.Client(cfg.HTTPClient), auth: a}, nil
}

// Response is a business method's answer as it came.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Error is a non-2xx answer other than the final 401 (that one is an
// *authz.RefusedError naming the scheme and identity).
type Error struct {
	Method  string
	Status  int
	Code    string // X-Service-ErrorCode
	Message string // the body's text, one line
	BoxID   string // the box asked about, for 403/404
}

// Error says the method, the status and the service's code and message.
func (e *Error) Error() string {
	var hint string
	switch {
	case e.Status == http.StatusForbidden && e.BoxID != "":
		hint = fmt.Sprintf("box %s is not among this user's boxes", e.BoxID)
	case e.Status == http.StatusNotFound && e.BoxID != "":
		hint = fmt.Sprintf("there is no box %s", e.BoxID)
	}
	return httpx.AnswerLine(e.Method, "the service", e.Status, e.Code, e.Message, hint)
}

// Is gives the service's answer its kind: failing or limiting requests
// (errdefs.ErrFailing), else a refusal (errdefs.ErrRefused).
func (e *Error) Is(target error) bool {
	if httpx.Failing(e.Status) {
		return target == errdefs.ErrFailing
	}
	return target == errdefs.ErrRefused
}

// Path checks a business method's path: one or more plain segments below
// the base URL, never a way out of it (.., //host, a scheme).
func Path(method string) (string, error) {
	p := "/" + strings.TrimLeft(method, "/")
	bad := strings.Contains(method, "://") || strings.HasPrefix(method, "//") || strings.ContainsAny(p, "?#\\\x00") ||
		strings.ContainsFunc(p, func(r rune) bool { return r < ' ' || r == 0x7f })
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." || strings.Contains(seg, "%") {
			bad = true
		}
	}
	if bad {
		return "", fmt.Errorf("%w: method path %q: want /Method (plain segments below the API address)", errdefs.ErrInvalidInput, httpx.Printable(method, 200))
	}
	return p, nil
}

// Do calls a method: httpMethod GET or POST (or any other), path as Path
// accepts, query and body as given. The answer is returned whatever its
// status, except a 401 after the retry (*authz.RefusedError).
func (c *Client) Do(ctx context.Context, httpMethod, path string, query url.Values, body []byte, contentType string) (*Response, error) {
	p, err := Path(path)
	if err != nil {
		return nil, err
	}
	u := *c.base
	u.Path = strings.TrimRight(c.base.Path, "/") + p
	u.RawQuery = query.Encode()
	name := strings.TrimPrefix(p, "/")
	resp, err := authz.Do(ctx, c.auth, func(ctx context.Context, authorization string) (*http.Response, error) {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		req, err := http.NewRequestWithContext(rctx, httpMethod, u.String(), bytes.NewReader(body))
		if err != nil {
			cancel()
			return nil, err
		}
		req.Header.Set("Authorization", authorization)
		req.Header.Set("Accept", "application/json")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if c.cfg.UserAgent != "" {
			req.Header.Set("User-Agent", c.cfg.UserAgent)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			cancel()
			if httpx.IsTimeout(rctx, err) {
				return nil, &httpx.TransportError{Method: name, Msg: "no answer in time", Timeout: true, Err: err}
			}
			return nil, &httpx.TransportError{Method: name, Msg: "could not reach the service: " + httpx.CleanErr(err).Error(), Err: err}
		}
		resp.Body = cancelOnClose{resp.Body, cancel}
		return resp, nil
	})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxBody+1))
	if err != nil {
		return nil, &httpx.TransportError{Method: name, Msg: "the answer was cut off", Err: err}
	}
	if int64(len(b)) > c.cfg.MaxBody {
		return nil, &httpx.TransportError{Method: name, Msg: fmt.Sprintf("the answer is larger than %d bytes", c.cfg.MaxBody)}
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }

// call runs a typed GET and decodes a 200's JSON into out; other statuses
// are an *Error.
func (c *Client) call(ctx context.Context, method string, query url.Values, boxID string, out any) error {
	r, err := c.Do(ctx, http.MethodGet, "/"+method, query, nil, "")
	if err != nil {
		return err
	}
	if r.Status != http.StatusOK {
		return AsError(method, r, boxID)
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err := json.Unmarshal(r.Body, out); err != nil {
		what := "not JSON"
		if ct == "text/html" {
			what = "an HTML page"
		}
		return &httpx.TransportError{Method: method, Msg: "the service answered " + what + " with HTTP 200"}
	}
	return nil
}

// AsError describes a non-2xx answer.
func AsError(method string, r *Response, boxID string) *Error {
	msg := strings.TrimSpace(string(r.Body))
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "text/html" || strings.HasPrefix(strings.ToLower(msg), "<!doctype") {
		msg = "(an HTML page)"
	}
	return &Error{Method: method, Status: r.Status, Code: httpx.Printable(r.Header.Get(ErrorCodeHeader), 200), Message: httpx.Printable(msg, 200), BoxID: boxID}
}
