// Package proxy is the agent's authorizing proxy: a partner system sends a
// business request to /v1/service/{method} with no service credentials and
// names the identity in IdentityHeader; the proxy adds that identity's
// Authorization header (from the agent's schemes), forwards the request to
// the business API over connections of its own, retries once with a fresh
// header on a 401, and streams the answer back as it came. What it needs of
// the agent (the business API's address, the identity's Authorizer, the
// audit line, the metrics, the error answer) it asks through Agent.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/business"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// IdentityHeader names the identity a proxied call is made for.
const IdentityHeader = "Signagent-Identity"

// ErrorHeader marks a proxied call's answer written by the agent itself
// (its error code), as opposed to the service's answer passed on: a
// client tells the agent's refusals from the service's by it.
const ErrorHeader = "Signagent-Error"

// requestIDHeader carries the request's id to the service (the agent's
// audit line names it); the service's own is not passed back.
const requestIDHeader = "X-Request-Id"

// Prefix is the path the proxy serves: Prefix + the business method.
const Prefix = "/v1/service/"

// errNoAPI answers proxied calls when the agent has no business API address.
var errNoAPI = errdefs.New(errdefs.ErrNotConfigured, "no business API address is configured (--business-url)")

// Agent is what the proxy needs of the agent that serves it.
type Agent interface {
	// Target is the business API now (nil: none is configured).
	Target() *Target
	// Begin opens the record of a call (its audit line, metrics and log),
	// which the proxy closes with one of Record's Answered or Failed.
	Begin(r *http.Request) Record
}

// Record is one proxied call as the agent accounts for it.
type Record interface {
	// RequestID is the request's id, sent on to the service.
	RequestID() string
	// Authorizer is the Authorizer of sel's identity, observed by the
	// agent (the identity and each header obtained go into the record).
	Authorizer(sel authz.Selector) (authz.Authorizer, error)
	// Answering is told the service answered (c.Status), before the
	// answer is passed on.
	Answering(c *Call)
	// Answered is told the answer was passed on, or cut off (c.Complete
	// says which; c.CutOff why).
	Answered(c *Call)
	// Failed answers the caller with the agent's error for err (with
	// ErrorHeader) and records the call.
	Failed(w http.ResponseWriter, c *Call, err error)
	// Refused answers a request the proxy does not take (a method other
	// than GET or POST) with the agent's error, and records nothing.
	Refused(w http.ResponseWriter, status int, code, message string)
}

// Call is what the proxy learnt of one call, for the agent's record.
type Call struct {
	Start  time.Time
	Method string // the business method, as the metrics label it
	Call   string // the business call: "GET /GetMyOrganizations"
	Status int    // the service's, when it answered
	// Date is the service's answer's Date header (its clock; empty:
	// none), At when that answer's headers arrived here.
	Date string
	At   time.Time
	// Retried says the call was sent again with a fresh Authorization
	// after a 401.
	Retried bool
	// Complete says the service's answer was read to its end; CutOff is
	// why it was not passed on whole (the caller or the service went away,
	// the deadline passed).
	Complete bool
	CutOff   error
	// Unanswered says the service did not answer (its connection failed,
	// or the deadline passed first); an answer the proxy refuses (a head
	// past its bounds, a lone 101) is an answer.
	Unanswered bool

	rec  Record
	body *heldBody // released when the call is done
	// values back the request id's and the Authorization header's values
	// (one allocation with the call instead of one per header).
	values [2]string
}

// Target is the business API the proxy forwards to, with its kept
// connections and the bounds of the answer heads it reads.
type Target struct {
	base      *url.URL
	heads     httpx.HeadLimits
	transport http.RoundTripper
}

// TargetFor is the target for the business API at rawURL whose answer
// heads are read within heads (zero values: httpx's defaults; past
// either bound the call is answered 502): cur when the address and the
// bounds are the same (its connections are kept), nil for none.
func TargetFor(cur *Target, rawURL string, allowHTTP bool, heads httpx.HeadLimits) (*Target, error) {
	if rawURL == "" {
		return nil, nil
	}
	base, err := httpx.ParseBaseURL(rawURL, allowHTTP)
	if err != nil {
		return nil, err
	}
	heads = heads.OrDefault()
	if cur != nil && cur.base.String() == base.String() && cur.heads == heads {
		return cur, nil
	}
	return &Target{base: base, heads: heads, transport: newUpstream(base, heads, httpx.Transport(heads))}, nil
}

// CloseIdle closes the target's kept connections that are idle (a target
// replaced by another address).
func (t *Target) CloseIdle() {
	if c, ok := t.transport.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Config is what the proxy is started with.
type Config struct {
	// LegacySNILS accepts SNILS numbers whose check number fails the rule.
	LegacySNILS bool
	// BodyBudget bounds the proxied bodies held at once, in memory or
	// spooled (default DefaultBodyBudget).
	BodyBudget int64
}

// Proxy serves Prefix + {method} for an agent.
type Proxy struct {
	agent       Agent
	legacySNILS bool
	bodies      *bodyBudget
	// identities are the parsed Signagent-Identity values.
	identities identityCache
	methods    methodLabels
}

// New returns the proxy of agent.
func New(agent Agent, c Config) *Proxy {
	if c.BodyBudget <= 0 {
		c.BodyBudget = DefaultBodyBudget
	}
	return &Proxy{agent: agent, legacySNILS: c.LegacySNILS, bodies: newBodyBudget(c.BodyBudget)}
}

// Is reports whether r is for the proxy. It is decided before the agent's
// mux, which would answer a path with ".." by a redirect.
func Is(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, Prefix) || strings.HasPrefix(r.URL.EscapedPath(), Prefix)
}

// proxy serves /v1/service/{method}: it checks the call, sends it with
// the identity's header (once more with a fresh one after a 401) and
// passes the service's answer on as it comes.
//
// It forwards by itself rather than through httputil.ReverseProxy, which
// copies the request and its headers per call and did a third of the
// agent's work on a proxied call in issue 26's profile; what it does
// that matters here is done the same way: hop-by-hop and forwarding
// headers dropped both ways, unparsable query parameters re-encoded, no
// default User-Agent, a streamed answer flushed as it comes, trailers
// passed on, and an answer cut off aborts the caller's connection.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	call := &Call{Start: time.Now(), Method: "other", rec: p.agent.Begin(r)}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		call.rec.Refused(w, http.StatusMethodNotAllowed, agentapi.CodeMethodNotAllowed, r.Method+" is not allowed on "+Prefix+"{method}; use GET or POST")
		return
	}
	out, target, au, err := p.prepare(r, call)
	if call.body != nil {
		defer call.body.Close()
	}
	if err == nil {
		var resp *http.Response
		if resp, err = p.send(out, target, au, call); err == nil {
			call.Status, call.At, call.Date = resp.StatusCode, time.Now(), resp.Header.Get("Date")
			call.rec.Answering(call)
			// The record is closed once the answer has been passed on (or
			// cut off: passOn then aborts the handler with a panic, which
			// this deferred call sees through).
			defer call.rec.Answered(call)
			p.passOn(w, resp, call)
			return
		}
	}
	var te *upstreamError
	if errors.As(err, &te) {
		call.Unanswered, err = te.classified()
	}
	call.rec.Failed(w, call, err)
}

// prepareProxy checks the request (path, identity, body) and turns it into
// the request to the business API: the caller's request itself, whose
// headers are changed in place (the handler is their last reader).
func (p *Proxy) prepare(r *http.Request, call *Call) (*http.Request, *Target, authz.Authorizer, error) {
	path, err := business.Path(strings.TrimPrefix(r.URL.EscapedPath(), strings.TrimSuffix(Prefix, "/")))
	if err != nil {
		return nil, nil, nil, err
	}
	call.Method = p.methods.label(strings.TrimPrefix(path, "/"))
	call.Call = r.Method + " " + path
	sel, err := p.identities.parse(r.Header.Get(IdentityHeader), p.legacySNILS)
	if err != nil {
		return nil, nil, nil, err
	}
	target := p.agent.Target()
	if target == nil {
		return nil, nil, nil, errNoAPI
	}
	au, err := call.rec.Authorizer(sel)
	if err != nil {
		return nil, nil, nil, err
	}
	// The body is read whole (MaxBytesReader bounds it) before anything is
	// sent, within the agent's budget of held bodies: a retry sends it
	// again.
	body, err := p.bodies.hold(r.Body, r.ContentLength)
	if err != nil {
		return nil, nil, nil, err
	}
	call.body = body

	h := r.Header
	trailers := hasToken(h["Te"], "trailers")
	dropHopByHop(h)
	// The service's credentials are the agent's to add; what the caller
	// sent for the agent, and forwarding headers it could forge, stay here.
	for _, k := range [...]string{"Authorization", "Cookie", IdentityHeader, "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		delete(h, k)
	}
	if trailers {
		h["Te"] = teTrailers // the agent passes trailers on
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = noUserAgent // no Go default in its place
	}
	// The service sees the request's id, the one in the audit line.
	call.values[0] = call.rec.RequestID()
	h[requestIDHeader] = call.values[0:1:1]
	base := target.base
	// r is wrap's copy of the server's request, the handler its last
	// reader: it becomes the request to the service, with no second copy.
	out := r
	out.URL = &url.URL{Scheme: base.Scheme, Host: base.Host, Path: strings.TrimRight(base.Path, "/") + path, RawQuery: cleanQuery(r.URL.RawQuery)}
	out.Host, out.RequestURI, out.Close, out.TransferEncoding, out.Trailer = "", "", false, nil, nil
	out.Form, out.PostForm, out.MultipartForm = nil, nil, nil
	return out, target, au, nil
}

// send sends out with the identity's header, and once more with a fresh
// one after a 401.
func (p *Proxy) send(out *http.Request, t *Target, au authz.Authorizer, call *Call) (*http.Response, error) {
	body := call.body
	resp, retried, err := authz.Retry(out.Context(), au, func(ctx context.Context, authorization string) (*http.Response, error) {
		out.Body, out.ContentLength, out.GetBody = http.NoBody, 0, nil
		if body.size > 0 {
			out.Body, out.ContentLength = io.NopCloser(body.reader()), body.size
			out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(body.reader()), nil }
		}
		call.values[1] = authorization
		out.Header["Authorization"] = call.values[1:2:2]
		resp, err := t.transport.RoundTrip(out)
		if err != nil {
			return nil, &upstreamError{ctx: ctx, err: err}
		}
		if resp.StatusCode < 200 {
			resp.Body.Close()
			return nil, &upstreamError{ctx: ctx, err: fmt.Errorf("the service answered %d, which the proxy does not pass on", resp.StatusCode), answered: true}
		}
		return resp, nil
	})
	call.Retried = retried
	return resp, err
}

// passOn writes the service's answer to the caller: its status, its
// end-to-end headers (the caller keeps the agent's X-Request-Id), its body
// as it comes, flushed at once when it streams (no length, or server-sent
// events), and its trailers. An answer cut off midway aborts the
// caller's connection (http.ErrAbortHandler), so that the caller cannot
// take it for whole.
func (p *Proxy) passOn(w http.ResponseWriter, resp *http.Response, call *Call) {
	dropHopByHop(resp.Header)
	delete(resp.Header, requestIDHeader)
	delete(resp.Header, ErrorHeader) // the agent's own, never the service's
	h := w.Header()
	for k, vv := range resp.Header {
		if cur, ok := h[k]; ok {
			h[k] = append(cur, vv...)
		} else {
			h[k] = vv // the answer's own slice: nothing changes it after
		}
	}
	announced := len(resp.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		h.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(resp.StatusCode)

	var flush func() error
	if resp.ContentLength == -1 || isEventStream(resp.Header.Get("Content-Type")) {
		flush = http.NewResponseController(w).Flush
	}
	if err := copyAnswer(w, resp.Body, flush, call); err != nil {
		resp.Body.Close()
		call.CutOff = httpx.CleanErr(err)
		panic(http.ErrAbortHandler)
	}
	resp.Body.Close() // now, to read the trailers
	if len(resp.Trailer) == 0 {
		return
	}
	// A trailer forces chunking: no Content-Length for a short body.
	http.NewResponseController(w).Flush()
	for k, vv := range resp.Trailer {
		if len(resp.Trailer) != announced {
			k = http.TrailerPrefix + k
		}
		for _, v := range vv {
			h.Add(k, v)
		}
	}
}

// copyAnswer copies the answer's body to w through a pooled buffer,
// flushing after each write when flush is set; call.Complete says the
// body was read to its end.
func copyAnswer(w io.Writer, body io.Reader, flush func() error, call *Call) error {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			if flush != nil {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			call.Complete = true
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// upstreamError is a proxied request that got no answer the proxy can
// pass on: none (answered false), or one it refuses (a lone interim
// answer, a head past its bounds).
type upstreamError struct {
	ctx      context.Context
	err      error
	answered bool
}

func (e *upstreamError) Error() string { return httpx.CleanErr(e.err).Error() }
func (e *upstreamError) Unwrap() error { return e.err }

// classified is whether the service did not answer (Call.Unanswered),
// and the error as an httpx.TransportError, which classify knows: a head
// past its bounds, a time-out (the request deadline) or no answer.
func (e *upstreamError) classified() (bool, error) {
	var he *httpx.HeadError
	if errors.As(e.err, &he) {
		he = headSetting(he)
		return false, &httpx.TransportError{Method: "the business call", Msg: "the service answered " + he.Error(), Err: he}
	}
	if httpx.IsTimeout(e.ctx, e.err) {
		return true, &httpx.TransportError{Method: "the business call", Msg: "the service did not answer within the request deadline", Err: context.DeadlineExceeded}
	}
	return !e.answered, &httpx.TransportError{Method: "the business call", Msg: "could not reach the service: " + e.Error()}
}
