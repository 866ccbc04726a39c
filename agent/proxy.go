package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/signagent/signagent/api"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/service"
)

// The authorizing proxy: a partner system sends a business request to
// /v1/service/{method} with no service credentials and names the identity
// in IdentityHeader; the agent adds that identity's Authorization header
// (cached), forwards the request to the business API, retries once with a
// fresh header on a 401, and streams the answer back as it came.

// IdentityHeader names the identity a proxied call is made for.
const IdentityHeader = "Signagent-Identity"

// ErrorHeader marks a proxied call's answer written by the agent itself
// (its error code), as opposed to the service's answer passed on: a
// client tells the agent's refusals from the service's by it.
const ErrorHeader = "Signagent-Error"

const servicePrefix = "/v1/service/"

// errNoAPI answers proxied calls when the agent has no business API address.
var errNoAPI = errdefs.New(errdefs.ErrNotConfigured, "no business API address is configured (--api-url)")

// proxyTarget is the business API the proxy forwards to.
type proxyTarget struct {
	base      *url.URL
	transport http.RoundTripper
	// errorLog gets the reverse proxy's own lines (an answer cut off
	// while it streamed: the caller went away, the deadline passed).
	errorLog *log.Logger
}

// SetServiceAPI points the proxy at the business API (start, reload); an
// empty address turns it off (503).
func (a *Agent) SetServiceAPI(rawURL string, allowHTTP bool) error {
	t, err := a.targetFor(rawURL, allowHTTP)
	if err != nil {
		return err
	}
	old := a.now().target
	a.update(func(s *state) { s.target = t })
	if old != nil && old != t {
		if c, ok := old.transport.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections() // the old address's kept connections
		}
	}
	return nil
}

// targetFor is the proxy's target for the business API at rawURL: the
// current one when the address is the same (its connections are kept),
// nil for none.
func (a *Agent) targetFor(rawURL string, allowHTTP bool) (*proxyTarget, error) {
	if rawURL == "" {
		return nil, nil
	}
	base, err := httpx.ParseBaseURL(rawURL, allowHTTP)
	if err != nil {
		return nil, badConfig(fmt.Errorf("--api-url: %w", err))
	}
	if cur := a.now().target; cur != nil && cur.base.String() == base.String() {
		return cur, nil
	}
	return &proxyTarget{base: base, transport: newUpstream(base, httpx.Client(nil).Transport),
		errorLog: warnLog(a.o.Log.With().Str("operation", "service").Logger())}, nil
}

// isProxied reports whether r is for the proxy. It is decided before the
// mux, which would answer a path with ".." by a redirect.
func isProxied(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, servicePrefix) || strings.HasPrefix(r.URL.EscapedPath(), servicePrefix)
}

// proxyCall is one proxied request's state, for the audit log and the
// metrics.
type proxyCall struct {
	entry   auditEntry
	method  string // business method, as the metrics label it
	status  int    // the service's, when it answered
	retried bool
	// complete says the service's answer was read to its end.
	complete bool
	body     *heldBody // released when the call is done
}

// proxy serves /v1/service/{method}.
func (a *Agent) proxy(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	call := &proxyCall{entry: entryFor(r, "service"), method: "other"}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		writeError(w, http.StatusMethodNotAllowed, APIError{Code: CodeMethodNotAllowed, Message: r.Method + " is not allowed on " + servicePrefix + "{method}; use GET or POST"})
		return
	}
	rp, err := a.prepareProxy(r, call)
	if call.body != nil {
		defer call.body.Close()
	}
	if err != nil {
		a.proxyFailed(w, call, start, err)
		return
	}
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) { a.proxyFailed(w, call, start, err) }
	rp.ModifyResponse = func(resp *http.Response) error {
		call.status = resp.StatusCode
		a.metrics.observeCall(call.method, resp.StatusCode, call.retried)
		resp.Body = &watchedBody{ReadCloser: resp.Body, complete: &call.complete}
		return nil
	}
	// The audit line is written once the answer has been passed on (or
	// cut off: the reverse proxy then aborts the handler with a panic,
	// which this deferred write sees through).
	defer func() {
		if call.status == 0 {
			return // proxyFailed wrote it
		}
		call.entry.outcome = "ok"
		if !call.complete {
			call.entry.outcome = auditCutOff
		}
		call.entry.latency, call.entry.status, call.entry.retried = time.Since(start), call.status, call.retried
		a.o.Audit.write(call.entry)
	}()
	rp.ServeHTTP(w, r)
}

// auditCutOff is the audit outcome of a proxied answer that did not reach
// the caller whole: the deadline passed, or the caller or the service went
// away while it streamed.
const auditCutOff = "answer_cut_off"

// watchedBody records whether the service's answer was read to its end.
type watchedBody struct {
	io.ReadCloser
	complete *bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		*b.complete = true
	}
	return n, err
}

// prepareProxy checks the request (path, identity, body) and returns the
// reverse proxy that forwards it.
func (a *Agent) prepareProxy(r *http.Request, call *proxyCall) (*httputil.ReverseProxy, error) {
	path, err := service.Path(strings.TrimPrefix(r.URL.EscapedPath(), strings.TrimSuffix(servicePrefix, "/")))
	if err != nil {
		return nil, err
	}
	call.method = a.metrics.methodLabel(strings.TrimPrefix(path, "/"))
	call.entry.call = r.Method + " " + path
	req, err := a.parsedIdentities.parse(r.Header.Get(IdentityHeader), a.o.LegacySNILS)
	if err != nil {
		return nil, err
	}
	target := a.now().target
	if target == nil {
		return nil, errNoAPI
	}
	au, err := a.authorizer(req, &call.entry)
	if err != nil {
		return nil, err
	}
	// The body is read whole (MaxBytesReader bounds it) before anything is
	// sent, within the agent's budget of held bodies: a retry sends it
	// again.
	body, err := a.bodies.hold(r.Body, r.ContentLength)
	if err != nil {
		return nil, err
	}
	call.body = body
	base := target.base
	requestID := call.entry.requestID
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: base.Scheme, Host: base.Host, Path: strings.TrimRight(base.Path, "/") + path, RawQuery: pr.In.URL.RawQuery}
			pr.Out.Host = ""
			// The service's credentials are the agent's to add; what the
			// caller sent for the agent stays here.
			for _, h := range []string{"Authorization", "Proxy-Authorization", "Cookie", IdentityHeader} {
				pr.Out.Header.Del(h)
			}
			// The service sees the request's id, the one in the audit line.
			pr.Out.Header.Set(RequestIDHeader, requestID)
		},
		// The caller gets the agent's id back, not a second one.
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del(RequestIDHeader)
			return nil
		},
		Transport: &authorizingTransport{au: au, body: body, base: target.transport, retried: &call.retried},
		ErrorLog:  target.errorLog,
		// A 32 KiB buffer per call was most of what the agent allocated
		// under proxy load, and so most of its garbage collection.
		BufferPool: &a.copies,
	}, nil
}

// proxyFailed answers a call the proxy could not complete with the
// agent's JSON error.
func (a *Agent) proxyFailed(w http.ResponseWriter, call *proxyCall, start time.Time, err error) {
	var te *upstreamError
	if errors.As(err, &te) {
		err = te.classified()
	}
	status, apiErr := classify(err)
	a.metrics.observeCall(call.method, status, call.retried)
	call.entry.outcome, call.entry.serviceCode, call.entry.latency = apiErr.Code, apiErr.ServiceCode, time.Since(start)
	call.entry.retried = call.retried
	a.o.Audit.write(call.entry)
	ev := a.o.Log.Info()
	if status >= 500 {
		ev = a.o.Log.Warn()
	}
	ev.Str("client", call.entry.caller).Str("operation", "service").Str("call", call.entry.call).Int("status", status).Str("code", apiErr.Code).Str("requestId", call.entry.requestID).Msg(apiErr.Message)
	w.Header().Set(ErrorHeader, apiErr.Code)
	writeError(w, status, apiErr)
}

// authorizingTransport sends the proxied request with the identity's
// header, and once more with a fresh one after a 401.
type authorizingTransport struct {
	au      authz.Authorizer
	body    *heldBody
	base    http.RoundTripper
	retried *bool
}

func (t *authorizingTransport) RoundTrip(in *http.Request) (*http.Response, error) {
	resp, retried, err := authz.Retry(in.Context(), t.au, func(ctx context.Context, authorization string) (*http.Response, error) {
		// in is the reverse proxy's own copy of the caller's request:
		// its headers are changed in place, not copied a second time.
		out := in.WithContext(ctx)
		out.Body, out.ContentLength, out.GetBody = http.NoBody, 0, nil
		if t.body.size > 0 {
			out.Body, out.ContentLength = io.NopCloser(t.body.reader()), t.body.size
			out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(t.body.reader()), nil }
		}
		out.Header["Authorization"] = []string{authorization}
		resp, err := t.base.RoundTrip(out)
		if err != nil {
			return nil, &upstreamError{ctx: ctx, err: err}
		}
		return resp, nil
	})
	*t.retried = retried
	return resp, err
}

// upstreamError is a proxied request that got no answer.
type upstreamError struct {
	ctx context.Context
	err error
}

func (e *upstreamError) Error() string { return httpx.CleanErr(e.err).Error() }
func (e *upstreamError) Unwrap() error { return e.err }

// classified is the error as a service.TransportError, which classify
// knows: a time-out (the request deadline) or no answer.
func (e *upstreamError) classified() error {
	if httpx.IsTimeout(e.ctx, e.err) {
		return &service.TransportError{Method: "the business call", Msg: "the service did not answer within the request deadline", Err: context.DeadlineExceeded}
	}
	return &service.TransportError{Method: "the business call", Msg: "could not reach the service: " + e.Error()}
}

// ParseIdentity reads IdentityHeader's value (authz.ParseSelector's
// syntax) and checks its credential, if any. The error names what is wrong
// without repeating the values.
func ParseIdentity(s string, legacySNILS bool) (authz.Selector, error) {
	sel, err := authz.ParseSelector(s)
	if err != nil {
		return authz.Selector{}, fmt.Errorf("%w: %s: %w", errdefs.ErrInvalidInput, IdentityHeader, err)
	}
	if sel.Credential != nil {
		if _, err := parseCredential(api.Credential(*sel.Credential), legacySNILS); err != nil {
			return authz.Selector{}, fmt.Errorf("%s: %w", IdentityHeader, err)
		}
	}
	return sel, nil
}

// identityCache keeps the parsed identity of the header values seen last:
// a partner system sends the same few identities call after call, and
// parsing and checking one costs more than the rest of the agent's work
// on a proxied call. Only identities that parse are kept; the cache
// starts over when full, so that callers cannot grow it.
type identityCache struct {
	mu sync.RWMutex
	m  map[string]authz.Selector
}

const maxCachedIdentities = 256

func (c *identityCache) parse(s string, legacySNILS bool) (authz.Selector, error) {
	key := s
	if legacySNILS {
		key = "\x00" + s
	}
	c.mu.RLock()
	sel, ok := c.m[key]
	c.mu.RUnlock()
	if ok {
		return sel, nil
	}
	sel, err := ParseIdentity(s, legacySNILS)
	if err != nil {
		return sel, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedIdentities {
		c.m = make(map[string]authz.Selector, maxCachedIdentities)
	}
	c.m[key] = sel
	c.mu.Unlock()
	return sel, nil
}

// The metrics name a business method only when it is a plain name and the
// agent has not labelled too many already: callers cannot grow /metrics.
var methodName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,63}(/[A-Za-z][A-Za-z0-9_]{0,63})?$`)

const maxMethodLabels = 64

type methodLabels struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (l *methodLabels) label(method string) string {
	l.mu.Lock()
	seen := l.seen[method]
	l.mu.Unlock()
	if seen {
		return method // checked when first seen
	}
	if !methodName.MatchString(method) {
		return "other"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	if !l.seen[method] {
		if len(l.seen) >= maxMethodLabels {
			return "other"
		}
		l.seen[method] = true
	}
	return method
}

// proxyBuffers lends httputil.ReverseProxy the buffers it copies answers
// through, instead of a new 32 KiB buffer per call.
type proxyBuffers struct{ pool sync.Pool }

const proxyBufferSize = 32 << 10

func (p *proxyBuffers) Get() []byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, proxyBufferSize)
}

func (p *proxyBuffers) Put(b []byte) {
	if cap(b) != proxyBufferSize {
		return // not one of ours
	}
	b = b[:proxyBufferSize]
	p.pool.Put(&b)
}
