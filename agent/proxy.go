package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

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
	return &proxyTarget{base: base, transport: newUpstream(base, httpx.Client(nil).Transport)}, nil
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
	// values back the request id's and the Authorization header's values
	// (one allocation with the call instead of one per header).
	values [2]string
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
func (a *Agent) proxy(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	call := &proxyCall{entry: entryFor(r, "service"), method: "other"}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		writeError(w, http.StatusMethodNotAllowed, APIError{Code: CodeMethodNotAllowed, Message: r.Method + " is not allowed on " + servicePrefix + "{method}; use GET or POST"})
		return
	}
	out, target, au, err := a.prepareProxy(r, call)
	if call.body != nil {
		defer call.body.Close()
	}
	if err == nil {
		var resp *http.Response
		if resp, err = a.send(out, target, au, call); err == nil {
			call.status = resp.StatusCode
			a.metrics.observeCall(call.method, resp.StatusCode, call.retried)
			// The audit line is written once the answer has been passed on
			// (or cut off: passOn then aborts the handler with a panic,
			// which this deferred write sees through).
			defer func() {
				call.entry.outcome = "ok"
				if !call.complete {
					call.entry.outcome = auditCutOff
				}
				call.entry.latency, call.entry.status, call.entry.retried = time.Since(start), call.status, call.retried
				a.o.Audit.write(call.entry)
			}()
			a.passOn(w, resp, call)
			return
		}
	}
	a.proxyFailed(w, call, start, err)
}

// auditCutOff is the audit outcome of a proxied answer that did not reach
// the caller whole: the deadline passed, or the caller or the service went
// away while it streamed.
const auditCutOff = "answer_cut_off"

// prepareProxy checks the request (path, identity, body) and turns it into
// the request to the business API: the caller's request itself, whose
// headers are changed in place (the handler is their last reader).
func (a *Agent) prepareProxy(r *http.Request, call *proxyCall) (*http.Request, *proxyTarget, authz.Authorizer, error) {
	path, err := service.Path(strings.TrimPrefix(r.URL.EscapedPath(), strings.TrimSuffix(servicePrefix, "/")))
	if err != nil {
		return nil, nil, nil, err
	}
	call.method = a.metrics.methodLabel(strings.TrimPrefix(path, "/"))
	call.entry.call = r.Method + " " + path
	req, err := a.parsedIdentities.parse(r.Header.Get(IdentityHeader), a.o.LegacySNILS)
	if err != nil {
		return nil, nil, nil, err
	}
	target := a.now().target
	if target == nil {
		return nil, nil, nil, errNoAPI
	}
	au, err := a.authorizer(req, &call.entry)
	if err != nil {
		return nil, nil, nil, err
	}
	// The body is read whole (MaxBytesReader bounds it) before anything is
	// sent, within the agent's budget of held bodies: a retry sends it
	// again.
	body, err := a.bodies.hold(r.Body, r.ContentLength)
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
	call.values[0] = call.entry.requestID
	h[RequestIDHeader] = call.values[0:1:1]
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
func (a *Agent) send(out *http.Request, t *proxyTarget, au authz.Authorizer, call *proxyCall) (*http.Response, error) {
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
			return nil, &upstreamError{ctx: ctx, err: fmt.Errorf("the service answered %d, which the proxy does not pass on", resp.StatusCode)}
		}
		return resp, nil
	})
	call.retried = retried
	return resp, err
}

// passOn writes the service's answer to the caller: its status, its
// end-to-end headers (the caller keeps the agent's X-Request-Id), its body
// as it comes, flushed at once when it streams (no length, or server-sent
// events), and its trailers. An answer cut off midway aborts the
// caller's connection (http.ErrAbortHandler), so that the caller cannot
// take it for whole.
func (a *Agent) passOn(w http.ResponseWriter, resp *http.Response, call *proxyCall) {
	dropHopByHop(resp.Header)
	delete(resp.Header, RequestIDHeader)
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
	if err := a.copyAnswer(w, resp.Body, flush, call); err != nil {
		resp.Body.Close()
		a.o.Log.Warn().Str("client", call.entry.caller).Str("operation", "service").Str("call", call.entry.call).
			Str("requestId", call.entry.requestID).Msgf("the answer was cut off during the body copy: %v", httpx.CleanErr(err))
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
// flushing after each write when flush is set; call.complete says the
// body was read to its end.
func (a *Agent) copyAnswer(w io.Writer, body io.Reader, flush func() error, call *proxyCall) error {
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
			call.complete = true
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
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
