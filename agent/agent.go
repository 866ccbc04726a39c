// Package agent is the local daemon: partner systems ask it for
// signatures, sessions, links and Authorization headers, and call the
// business API through its proxy (package agent/proxy), instead of
// touching the token, the API key or the service's credentials
// themselves. Its one entrance is Start, which builds the daemon from a
// Config (Reload takes a new one, Shutdown ends it). It listens on the
// sockets of package agent/listen, authenticates callers (peer
// credentials on the Unix socket, a bearer token on TCP), routes by one
// table, signs through the token's queue (package agent/tokenq), caches
// trusted sessions, serves the schemes package schemes builds from the
// configuration with what the agent lends them (it names none of them),
// writes an audit line per operation (to a file of agent/auditlog) and
// exports metrics (agent/metrics).
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

	"github.com/signagent/signagent/agent/access"
	"github.com/signagent/signagent/agent/auditlog"
	"github.com/signagent/signagent/agent/health"
	"github.com/signagent/signagent/agent/metrics"
	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

// Agent serves the API: the handlers, the proxy, the caller checks, the
// audit log and the metrics over the reloadable state. A Daemon (Start)
// builds it from its Config.
type Agent struct {
	cfg     Config // as at start: what a reload changes is in cur
	audit   *auditlog.Writer
	tm      *tokenq.Manager
	cache   *trusted.Sessions
	metrics *metrics.Metrics
	// cur is the reloadable state (see state); writer orders its writers.
	cur    atomic.Pointer[state]
	writer sync.Mutex
	// refusals rate-limits the log and audit lines of refused callers.
	refusals *sampler
	proxy    *proxy.Proxy
	// held indexes the identities headers were obtained for.
	held held
	// deps is what the agent saw of its shared dependencies; kick asks
	// the store's probe to look at once, stop ends it.
	deps       health.Dependencies
	kick, stop chan struct{}
}

// newAgent is the agent of cfg (validated) over the token manager tm (nil:
// no token), writing its audit lines to audit; its state is published by
// the daemon.
func newAgent(cfg Config, tm *tokenq.Manager, audit *auditlog.Writer) *Agent {
	a := &Agent{cfg: cfg, audit: audit, tm: tm, cache: trusted.NewSessions(cfg.SessionTTL), refusals: newSampler(10, time.Second)}
	a.metrics = metrics.New(tm, metrics.Build{Version: cfg.Version, Commit: cfg.Commit}, cfg.SchemeList, metrics.Probes{
		RefreshExpiries: a.refreshExpiries,
	})
	a.proxy = proxy.New(proxyAgent{a}, proxy.Config{LegacySNILS: cfg.LegacySNILS, BodyBudget: cfg.ServiceBodyBudget})
	a.cur.Store(&state{})
	a.kick, a.stop = make(chan struct{}, 1), make(chan struct{})
	a.metrics.Dependencies(a.deps.Up)
	go a.probeStore(a.stop, a.kick)
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
		a.metrics.StoreOp(op, result)
		if o, ok := once[result]; ok {
			o.Do(func() { a.cfg.Log.Warn().Msg(warnings[result]) })
		}
	})
}

// handler returns the API, behind auth (which authenticates the caller and
// returns its name for the audit log, or an error answer).
func (a *Agent) handler(auth access.Authenticator) http.Handler {
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
			writeError(w, http.StatusMethodNotAllowed, APIError{Code: agentapi.CodeMethodNotAllowed, Message: r.Method + " is not allowed on " + path + "; use " + strings.Join(allow, " or ")})
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, APIError{Code: agentapi.CodeNotFound, Message: "no such endpoint: " + r.Method + " " + r.URL.Path})
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
func entryFor(r *http.Request, operation string) auditlog.Entry {
	return auditlog.Entry{Caller: callerOf(r), Operation: operation, RequestID: requestIDOf(r)}
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

func (a *Agent) wrap(mux http.Handler, auth access.Authenticator) http.Handler {
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
			a.metrics.Request("other", "refused", status, -1)
			if ok, suppressed := a.refusals.allow(start); ok {
				a.cfg.Log.Warn().Str("client", caller).Str("route", route).Int("status", status).Str("reason", apiErr.Message).Int("suppressed", suppressed).Str("requestId", id).Msg("caller refused")
				a.audit.Write(auditlog.Entry{Caller: caller, Operation: route, Outcome: apiErr.Code, Latency: time.Since(start), RequestID: id})
			}
			sw.Header().Set("Connection", "close")
			writeError(sw, status, apiErr)
			return
		}
		defer func() {
			method, path := splitRoute(route)
			a.metrics.Request(method, path, sw.status, time.Since(start))
		}()
		if !a.routeAllowed(r, route) {
			sw.Header().Set("Connection", "close")
			writeError(sw, http.StatusForbidden, APIError{Code: agentapi.CodeForbidden, Message: fmt.Sprintf("%s is not open to %s (route rules)", route, caller)})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestDeadline)
		defer cancel()
		ctx = context.WithValue(ctx, requestInfoKey, &requestInfo{caller: caller, id: id})
		limit := a.cfg.MaxBody
		if rt, _ := routeNamed(route); rt.body == serviceBody {
			limit = a.cfg.ServiceMaxBody
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

// announce makes the agent one of s's live agents: it says which record
// formats it reads, renewed until the daemon stops (store/formats.go), and
// the metrics report the formats read and written. It does not wait for
// the store (the first announcement is made in the background).
func (a *Agent) announce(s store.Records) {
	f, ok := s.(interface {
		Announce() <-chan error
		Formats() store.Formats
	})
	if !ok {
		a.metrics.StoreFormats(nil)
		return
	}
	first := f.Announce() // in the background: a store down delays no start nor reload
	go func() {
		if err := <-first; err != nil {
			a.cfg.Log.Warn().Err(err).Msg("could not announce the record formats this agent reads on the shared store; it writes the oldest every agent reads until it can")
		}
	}()
	a.metrics.StoreFormats(func() (read, write int, agents map[string]int) {
		got := f.Formats()
		return got.Read[len(got.Read)-1], got.Write, got.Agents
	})
}
