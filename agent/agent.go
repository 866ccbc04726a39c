// Package agent is the local daemon's HTTP API: partner systems ask it for
// signatures, sessions and links instead of touching the token or the API
// key themselves. It authenticates callers (peer credentials on the Unix
// socket, a bearer token on TCP), queues token work with backpressure,
// caches sessions, writes an audit log and exports metrics.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

// Options configures an Agent.
type Options struct {
	// Version is the program's version, exported as signagent_build_info.
	Version string
	Token   *tokenq.Manager
	// Client runs the trusted-authentication flow; nil answers session and
	// link requests with 503 service_not_configured.
	Client *trusted.Client
	// APIKey is the partner's API key, written into the signed text.
	APIKey string
	Log    zerolog.Logger
	Audit  *Audit
	// SessionTTL is how long an auth.sid is served from the cache (default
	// 12h, well under the service's 30 days).
	SessionTTL time.Duration
	// RequestDeadline bounds each request, waiting for the token included
	// (default 30s).
	RequestDeadline time.Duration
	// MaxBody bounds request bodies (default 64 KiB).
	MaxBody int64
	// LegacySNILS accepts SNILS numbers whose check number fails the rule.
	LegacySNILS bool
	// Policy is what the agent hands out and does (reloadable).
	Policy
	// Routes opens routes per caller class (see RouteRule).
	Routes []RouteRule
	// RefreshFloor: a caller's "refresh": true replaces a session or an
	// Authorization header only once it is this old (default 30s); a
	// younger one is handed out again, so that a caller repeating refresh
	// cannot make the agent log in or sign on every request. A value the
	// service refused (the proxy's retry) is replaced at once.
	RefreshFloor time.Duration
	// ServiceBodyBudget bounds the proxied bodies held at once, in memory
	// or spooled (default 256 MiB); a call that does not fit is answered
	// 503 busy at once.
	ServiceBodyBudget int64
	// ServiceMaxBody bounds the bodies of proxied business calls (default
	// 16 MiB); they are held in memory for the retry after a 401.
	ServiceMaxBody int64
}

// DefaultRefreshFloor is Options.RefreshFloor's default.
const DefaultRefreshFloor = 30 * time.Second

// Agent serves the API.
type Agent struct {
	o       Options
	tm      *tokenq.Manager
	cache   *trusted.Sessions
	metrics *metrics
	// cur is the reloadable state (see state); writer orders its writers.
	cur    atomic.Pointer[state]
	writer stateWriter
	// refusals rate-limits the log and audit lines of refused callers.
	refusals *sampler
	proxy    *proxy.Proxy
	// held indexes the identities headers were obtained for.
	held held
}

// DefaultRequestDeadline bounds a request when Options.RequestDeadline
// is not set.
const DefaultRequestDeadline = 30 * time.Second

// New returns an agent.
func New(o Options) *Agent {
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.RequestDeadline <= 0 {
		o.RequestDeadline = DefaultRequestDeadline
	}
	if o.MaxBody <= 0 {
		o.MaxBody = 64 << 10
	}
	if o.RefreshFloor <= 0 {
		o.RefreshFloor = DefaultRefreshFloor
	}
	if o.ServiceMaxBody <= 0 {
		o.ServiceMaxBody = 16 << 20
	}
	a := &Agent{o: o, tm: o.Token, cache: trusted.NewSessions(o.SessionTTL), metrics: newMetrics(o.Token, o.Version), refusals: newSampler(10, time.Second)}
	a.proxy = proxy.New(proxyAgent{a}, proxy.Config{LegacySNILS: o.LegacySNILS, BodyBudget: o.ServiceBodyBudget})
	st := &state{key: o.APIKey, client: o.Client, rules: o.Routes, policy: o.Policy}
	st.schemes = a.buildSchemes(st)
	a.cur.Store(st)
	return a
}

// Policy is what the agent hands out and does for its callers, beyond the
// route rules.
type Policy struct {
	// ExposeCanonical returns the signed text (it holds the partner's API
	// key) in /v1/signatures answers. Off by default: the agent exists so
	// that callers do not hold the key.
	ExposeCanonical bool
	// ExposeLegacyHeader hands out legacy Authorization header values in
	// /v1/authorizations answers. Off by default: the value holds the
	// integrator's developer key; callers use the proxy instead.
	ExposeLegacyHeader bool
	// NoCertificateLogin turns legacy certificate login off: the token is
	// never asked to decrypt a service's challenge.
	NoCertificateLogin bool
}

// SetPolicy replaces the policy (configuration reload).
func (a *Agent) SetPolicy(p Policy) { a.update(func(s *state) { s.policy = p }) }

// SetSharedStore keeps trusted sessions and legacy tokens in s, shared with every agent on
// it (nil: in this agent's memory only).
func (a *Agent) SetSharedStore(s store.Records) { a.update(func(st *state) { st.shared = s }) }

// observeStore counts s's operations in the metrics and says once in the
// log, for each kind, that a value was not used: it did not open with the
// store key, it was over the store's size bound (not read), or it was
// older than one this agent had seen (put back in Redis).
func (a *Agent) observeStore(s store.Records) {
	if s == nil {
		return
	}
	warnings := map[string]string{
		"sealed":    "a value in the shared store did not open with the store key (tampered, moved to another identity, or sealed with a key not in the key file); it is not used, and each one is counted in signagent_store_operations_total{result=\"sealed\"}",
		"too_large": "a value in the shared store is over the store's size bound; it was not read nor used, and each one is counted in signagent_store_operations_total{result=\"too_large\"}",
		"rollback":  "a record in the shared store is older than one this agent has seen (put back in Redis?); it is not used, and each one is counted in signagent_store_operations_total{result=\"rollback\"}",
	}
	once := map[string]*sync.Once{}
	for k := range warnings {
		once[k] = new(sync.Once)
	}
	s.Observe(func(op, result string) {
		a.metrics.storeOps.WithLabelValues(op, result).Inc()
		if o, ok := once[result]; ok {
			o.Do(func() { a.o.Log.Warn().Msg(warnings[result]) })
		}
	})
}

// ObserveSign records a token signature in the metrics; pass it as
// tokenq.Options.OnSign.
func (a *Agent) ObserveSign(d time.Duration, err error) { a.metrics.observeSign(d.Seconds(), err) }

// Handler returns the API, behind auth (which authenticates the caller and
// returns its name for the audit log, or an error answer).
func (a *Agent) Handler(auth Authenticator) http.Handler {
	// Routes are dispatched by path, then by method, so that a wrong method
	// gets a JSON 405 with Allow, like every other error.
	byPath := map[string]map[string]http.HandlerFunc{}
	for _, r := range routeTable {
		if r.handler == nil {
			continue // the proxy, dispatched before the mux
		}
		if byPath[r.path] == nil {
			byPath[r.path] = map[string]http.HandlerFunc{}
		}
		byPath[r.path][r.method] = r.handler(a)
	}
	mux := http.NewServeMux()
	for path, methods := range byPath {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if h, ok := methods[r.Method]; ok {
				h(w, r)
				return
			}
			allow := make([]string, 0, len(methods))
			for m := range methods {
				allow = append(allow, m)
			}
			slices.Sort(allow)
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, APIError{Code: CodeMethodNotAllowed, Message: r.Method + " is not allowed on " + path + "; use " + strings.Join(allow, " or ")})
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, APIError{Code: CodeNotFound, Message: "no such endpoint: " + r.Method + " " + r.URL.Path})
	})
	return a.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if proxy.Is(r) {
			a.proxy.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}), auth)
}

type ctxKey int

// requestInfoKey holds a request's requestInfo.
const requestInfoKey ctxKey = 1

// requestInfo is what wrap learned of a request: who called, and the
// request's id (one context value for both).
type requestInfo struct {
	caller string
	id     string
}

// RequestIDHeader carries a request's id: the caller's when it sent a
// usable one (a log collector's, a partner system's trace), else one the
// agent makes; the answer carries it back, and the request's audit and
// log lines name it.
const RequestIDHeader = "X-Request-Id"

// requestID is r's usable X-Request-Id (1 to 64 of A-Z a-z 0-9 . _ : -),
// else a new random one.
func requestID(r *http.Request) string {
	id := r.Header.Get(RequestIDHeader)
	if len(id) > 0 && len(id) <= 64 && strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-") == "" {
		return id
	}
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestIDOf is the id wrap gave r.
func requestIDOf(r *http.Request) string {
	info, _ := r.Context().Value(requestInfoKey).(*requestInfo)
	if info == nil {
		return ""
	}
	return info.id
}

// entryFor starts the audit line of r's operation.
func entryFor(r *http.Request, operation string) auditEntry {
	return auditEntry{caller: callerOf(r), operation: operation, requestID: requestIDOf(r)}
}

func callerOf(r *http.Request) string {
	if info, ok := r.Context().Value(requestInfoKey).(*requestInfo); ok {
		return info.caller
	}
	return "unknown"
}

// statusWriter remembers the status for metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection's Flush: the
// proxy flushes a streamed answer as it comes.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// splitRoute is a route's method and path labels: "POST /v1/signatures"
// is POST and /v1/signatures; "other" (no such route) has method other,
// so that invented methods cannot grow the metrics either.
func splitRoute(route string) (method, path string) {
	if m, p, ok := strings.Cut(route, " "); ok {
		return m, p
	}
	return "other", route
}

// routeLabel is the metrics label of a request: one of Routes, or "other"
// for any other method or path. Labels come from this fixed set only, so
// that callers cannot grow the metrics by inventing methods and paths.
func routeLabel(r *http.Request) string {
	if proxy.Is(r) {
		switch r.Method {
		case http.MethodGet:
			return proxyGet
		case http.MethodPost:
			return proxyPost
		}
		return "other"
	}
	route := r.Method + " " + r.URL.Path
	if rt, ok := routeNamed(route); ok && rt.handler != nil {
		return route
	}
	return "other"
}

func (a *Agent) wrap(mux http.Handler, auth Authenticator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		route := routeLabel(r)
		id := requestID(r)
		sw.Header().Set(RequestIDHeader, id)
		caller, status, apiErr := auth.Authenticate(r)
		if status != 0 {
			// Refused callers share one label, one log budget and a
			// closed connection: they cannot grow the metrics, fill the
			// logs, or keep descriptors open.
			a.metrics.observeRequest("other", "refused", status, -1)
			if ok, suppressed := a.refusals.allow(start); ok {
				a.o.Log.Warn().Str("client", caller).Str("route", route).Int("status", status).Str("reason", apiErr.Message).Int("suppressed", suppressed).Str("requestId", id).Msg("caller refused")
				a.o.Audit.write(auditEntry{caller: caller, operation: route, outcome: apiErr.Code, latency: time.Since(start), requestID: id})
			}
			sw.Header().Set("Connection", "close")
			writeError(sw, status, apiErr)
			return
		}
		defer func() {
			method, path := splitRoute(route)
			a.metrics.observeRequest(method, path, sw.status, time.Since(start))
		}()
		if !a.routeAllowed(r, route) {
			sw.Header().Set("Connection", "close")
			writeError(sw, http.StatusForbidden, APIError{Code: CodeForbidden, Message: fmt.Sprintf("%s is not open to %s (route rules)", route, caller)})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), a.o.RequestDeadline)
		defer cancel()
		ctx = context.WithValue(ctx, requestInfoKey, &requestInfo{caller: caller, id: id})
		limit := a.o.MaxBody
		if rt, _ := routeNamed(route); rt.body == serviceBody {
			limit = a.o.ServiceMaxBody
		}
		if r.Body != http.NoBody { // nothing to bound (most GETs): no reader to allocate
			r.Body = http.MaxBytesReader(sw, r.Body, limit)
		}
		mux.ServeHTTP(sw, r.WithContext(ctx))
	})
}

var errBadJSON = errdefs.New(errdefs.ErrInvalidInput, "the request body is not the expected JSON")

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return fmt.Errorf("%w: %v", errBadJSON, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: more than one JSON value", errBadJSON)
	}
	return nil
}
