// Package agentclient is the Go client of the signagent agent, for partner
// systems: over the agent's Unix socket (NewUnix; FromEnv finds it through
// SIGNAGENT_AGENT_SOCK, as ssh clients find ssh-agent) or TCP with its
// bearer token (NewTCP), it asks for signatures, trusted sessions (and
// drops them), links, Authorization headers and the identities held, says
// whether the agent is ready, and calls a business method through the
// agent's proxy (Call), so that the program never touches the token, the
// API key or a scheme's secrets. The agent's refusals are an *Error.
//
//	c := agentclient.NewUnix("/run/user/1000/signagent/agent.sock")
//	s, err := c.Session(ctx, agentapi.SessionRequest{Credential: agentapi.Credential{Phone: "9161234567"}, ServiceUserID: "crm-42"})
package agentclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/internal/httpx"
)

// The bounds of what the client reads of an agent's answer.
const (
	// HeaderTimeout bounds the wait for an answer's head, whatever the
	// caller's context: a backstop for a caller with no deadline. The
	// agent answers 504 itself at its --request-deadline (30 s by default,
	// waiting for the token included), well before it.
	HeaderTimeout = 2 * time.Minute
	// MaxHeaderFields and MaxHeaderBytes bound an answer's head: a
	// service's head the agent passes on (at most its
	// --service-max-header-fields, 100, and --service-max-header-bytes,
	// 64 KiB, by default; at most these less the agent's own few fields:
	// agent.MaxServiceHeaderFields, MaxServiceHeaderBytes) with the
	// agent's own fields. What a head
	// costs to hold is its fields (about 400 bytes each) more than its
	// bytes, and net/http counts only the bytes: the client counts the
	// fields as they come (httpx.BoundHeads). Past either the call fails
	// with an *httpx.HeadError.
	MaxHeaderFields = 128
	MaxHeaderBytes  = 1 << 20
	// maxJSONAnswer bounds the agent's own JSON answers.
	maxJSONAnswer = 1 << 20
	// maxCallAnswer bounds a service's answer through the proxy.
	maxCallAnswer = 64 << 20
	// dialTimeout bounds connecting to the agent (and, over TCP, the TLS
	// handshake).
	dialTimeout = 5 * time.Second
)

// Client talks to one agent.
type Client struct {
	http   *http.Client
	base   string
	bearer string
}

// NewUnix returns a client for the agent's Unix socket. Every connection
// it makes is checked before anything is sent on it: the agent must run
// as this user, root or ServiceUser (SO_PEERCRED), else the call fails
// with a *PeerError (ErrUntrustedPeer).
func NewUnix(socket string) *Client {
	trusted := sync.OnceValue(trustedUIDs)
	tr := transport()
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		d := net.Dialer{Timeout: dialTimeout}
		c, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return nil, err
		}
		if err := verifyPeer(c, socket, trusted()); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	return &Client{http: &http.Client{Transport: boundHeads(tr)}, base: "http://signagent"}
}

// NewTCP returns a client for the agent's TCP listener, e.g.
// "http://127.0.0.1:8700" with the token from the agent's bearer token
// file. tlsCfg is used for an https address (nil: the system's roots).
func NewTCP(baseURL, bearerToken string, tlsCfg *tls.Config) *Client {
	tr := transport()
	tr.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = dialTimeout
	tr.TLSClientConfig = tlsCfg
	return &Client{http: &http.Client{Transport: boundHeads(tr)}, base: baseURL, bearer: bearerToken}
}

// transport is what both ways to the agent share: kept connections, and
// the wait for an answer's head.
func transport() *http.Transport {
	return &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: HeaderTimeout}
}

// boundHeads bounds the heads tr reads (its dial set).
func boundHeads(tr *http.Transport) http.RoundTripper {
	return httpx.BoundHeads(tr, httpx.HeadLimits{Fields: MaxHeaderFields, Bytes: MaxHeaderBytes})
}

// Error is an error answer of the agent.
type Error struct {
	Status int // HTTP status
	// Body is the agent's error: Code, Message, and for refusals by the
	// service its ServiceCode and Step.
	Body agentapi.Error
	// RetryAfter is the agent's Retry-After, for 429 and 503.
	RetryAfter time.Duration
}

// Error says the agent's status and its answer's code and message.
func (e *Error) Error() string {
	return fmt.Sprintf("signagent agent: HTTP %d %s: %s", e.Status, e.Body.Code, e.Body.Message)
}

// Temporary reports whether trying again later may succeed: the token was
// busy or out, or the service failed.
func (e *Error) Temporary() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// Sign asks for a detached signature of the text for a credential.
func (c *Client) Sign(ctx context.Context, req agentapi.SignatureRequest) (*agentapi.SignatureResponse, error) {
	var out agentapi.SignatureResponse
	return &out, c.do(ctx, http.MethodPost, "/v1/signatures", req, &out)
}

// Session asks for an auth.sid (from the agent's cache when it has one).
func (c *Client) Session(ctx context.Context, req agentapi.SessionRequest) (*agentapi.SessionResponse, error) {
	var out agentapi.SessionResponse
	return &out, c.do(ctx, http.MethodPost, "/v1/sessions", req, &out)
}

// Authorization asks for the Authorization header value of a business call
// (legacy scheme: ServiceAuth ddauth_api_client_id=...,ddauth_token=...),
// from the agent's cache when it has one. Set Refresh after the service
// answered 401 to the value.
func (c *Client) Authorization(ctx context.Context, req agentapi.AuthorizationRequest) (*agentapi.AuthorizationResponse, error) {
	var out agentapi.AuthorizationResponse
	return &out, c.do(ctx, http.MethodPost, "/v1/authorizations", req, &out)
}

// DropSession makes the agent forget a cached auth.sid, e.g. one the service
// rejected. It reports whether one was cached.
func (c *Client) DropSession(ctx context.Context, cred agentapi.Credential, serviceUserID string) (bool, error) {
	q := url.Values{"serviceUserId": {serviceUserID}}
	for k, v := range map[string]string{"phone": cred.Phone, "snils": cred.SNILS, "thumbprint": cred.Thumbprint} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var out agentapi.DropResponse
	return out.Dropped, c.do(ctx, http.MethodDelete, "/v1/sessions?"+q.Encode(), nil, &out)
}

// Link asks the service, through the agent, to link a user by phone.
func (c *Client) Link(ctx context.Context, serviceUserID, phone string) error {
	var out agentapi.LinkResponse
	return c.do(ctx, http.MethodPost, "/v1/links", agentapi.LinkRequest{ServiceUserID: serviceUserID, Phone: phone}, &out)
}

// Ready returns the token's state; err is an *Error with status 503 while
// the token is not ready.
func (c *Client) Ready(ctx context.Context) (*agentapi.ReadyResponse, error) {
	var out agentapi.ReadyResponse
	err := c.do(ctx, http.MethodGet, "/readyz", nil, &out)
	return &out, err
}

// Alive asks whether the agent's process serves at all (/healthz); a
// container's liveness probe, unlike readiness, does not depend on the
// token or the store.
func (c *Client) Alive(ctx context.Context) error {
	var out map[string]any
	return c.do(ctx, http.MethodGet, "/healthz", nil, &out)
}

// Live is Alive by /livez, which the metrics listener (--metrics-listen)
// serves as well, without the bearer token (it has no /healthz). Agents
// of the previous release serve /healthz alone: Alive asks them.
func (c *Client) Live(ctx context.Context) error {
	var out map[string]any
	return c.do(ctx, http.MethodGet, "/livez", nil, &out)
}

// ErrorHeader marks the agent's own answer to a proxied call (see
// agent/proxy.ErrorHeader).
const ErrorHeader = "Signagent-Error"

// Answer is the service's answer to a call through the agent's proxy, as
// it came.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Call calls the business method at path (with query and, for POST, body)
// through the agent's proxy, for the identity named in the
// Signagent-Identity syntax (authz.Selector.Text): the agent adds the
// identity's header, cached, and retries once after a 401. The service's
// answer comes back as it came, whatever its status; the agent's own
// refusal (no such identity, the service unreachable) is an *Error.
// Answers above 64 MiB are an error.
func (c *Client) Call(ctx context.Context, method, path string, query url.Values, identity string, body []byte, contentType string) (*Answer, error) {
	u := c.base + "/v1/service/" + strings.TrimPrefix(path, "/")
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Signagent-Identity", identity)
	if body != nil && contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, sendErr(err)
	}
	defer resp.Body.Close()
	data, err := httpx.ReadAnswer(resp.Body, maxCallAnswer)
	if err != nil {
		return nil, fmt.Errorf("signagent agent: %w", err)
	}
	var eb agentapi.ErrorBody
	agentOwn := resp.Header.Get(ErrorHeader) != "" ||
		(resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && json.Unmarshal(data, &eb) == nil && eb.Error.Code != ""
	if agentOwn {
		e := &Error{Status: resp.StatusCode, Body: agentapi.Error{Code: resp.Header.Get(ErrorHeader), Message: http.StatusText(resp.StatusCode)}}
		if json.Unmarshal(data, &eb) == nil && eb.Error.Code != "" {
			e.Body = eb.Error
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		return nil, e
	}
	return &Answer{Status: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

// sendErr is the error of a request that got no answer: a refused peer
// as it is (one line naming the socket and its user), anything else
// with the request it was.
func sendErr(err error) error {
	var pe *PeerError
	if errors.As(err, &pe) {
		return pe
	}
	var he *httpx.HeadError
	if errors.As(err, &he) {
		return fmt.Errorf("signagent agent: answered %w", he)
	}
	return fmt.Errorf("signagent agent: %w", err)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return sendErr(err)
	}
	defer resp.Body.Close()
	data, err := httpx.ReadAnswer(resp.Body, maxJSONAnswer)
	if errors.Is(err, httpx.ErrAnswerTooLarge) {
		return fmt.Errorf("signagent agent: HTTP %d: %w", resp.StatusCode, err)
	}
	if err != nil {
		return fmt.Errorf("signagent agent: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Status: resp.StatusCode}
		var eb agentapi.ErrorBody
		if json.Unmarshal(data, &eb) == nil && eb.Error.Code != "" {
			e.Body = eb.Error
		} else if path == "/readyz" && json.Unmarshal(data, out) == nil {
			e.Body = agentapi.Error{Code: agentapi.CodeTokenNotReady, Message: "the token is not ready"}
		} else {
			e.Body = agentapi.Error{Code: "http_error", Message: http.StatusText(resp.StatusCode)}
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		return e
	}
	return json.Unmarshal(data, out)
}

// Identities lists the identities the agent holds a header for (masked).
func (c *Client) Identities(ctx context.Context) ([]agentapi.Identity, error) {
	var out agentapi.IdentitiesResponse
	err := c.do(ctx, http.MethodGet, "/v1/identities", nil, &out)
	return out.Identities, err
}
