// Package metrics is the agent's Prometheus metrics, in a registry of its
// own: requests by route and status, the token's signatures and queue,
// sessions, each scheme's authorizations and where their values came
// from (series named from the scheme list, each counted from zero), the
// shared store's operations and the proxied calls. Its labels come from
// fixed sets only, so that callers cannot grow it.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/trusted"
)

// Metrics are the agent's Prometheus metrics, in a registry of its own.
type Metrics struct {
	reg         *prometheus.Registry
	formats     *storeFormats // the shared store's record formats
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	signing     prometheus.Histogram
	signErrors  *prometheus.CounterVec
	cacheHits   prometheus.Counter
	cacheMisses prometheus.Counter
	rejected    prometheus.Counter
	authz       *prometheus.CounterVec
	storeOps    *prometheus.CounterVec
	certLogins  *prometheus.CounterVec
	sessions    *prometheus.CounterVec
	sources     *prometheus.CounterVec
	// refreshes are signagent_SCHEME_refreshes_total, for each scheme
	// that refreshes (schemes.Entry.Refreshes).
	refreshes map[string]*prometheus.CounterVec
	calls     *prometheus.CounterVec
	retries   *prometheus.CounterVec
	// children are the request counters and duration histograms already
	// resolved, by route and status: labels come from a fixed set (routes,
	// "other", "refused"), so the map stays small.
	children sync.Map // requestKey -> requestChildren
	// resolved holds the other per-call counters' children, resolved once
	// per label values (bounded sets too: schemes, results, sources, the
	// labelled methods and statuses).
	resolved sync.Map // counterKey -> prometheus.Counter
	tm       *tokenq.Manager
	// skew is the service's clock minus this machine's, last seen
	// (skewSeen false: no answer yet), in nanoseconds.
	skew     atomic.Int64
	skewSeen atomic.Bool
	// date is the last Date header parsed: answers bring the same one
	// for a second.
	date atomic.Pointer[serviceDate]
}

// Build is the build signagent_build_info labels: its version and commit
// (as signagent version --json says them).
type Build struct{ Version, Commit string }

// counterKey names a child of one of the per-call counter vectors: labels
// a and b, or a and the status n (n < 0: none).
type counterKey struct {
	vec  *prometheus.CounterVec
	a, b string
	n    int
}

// inc counts one under vec's labels a and b, resolving the child once.
func (m *Metrics) inc(vec *prometheus.CounterVec, a, b string) {
	m.incKey(counterKey{vec: vec, a: a, b: b, n: -1})
}

// incStatus counts one under vec's labels a and the status n.
func (m *Metrics) incStatus(vec *prometheus.CounterVec, a string, n int) {
	m.incKey(counterKey{vec: vec, a: a, n: n})
}

func (m *Metrics) incKey(k counterKey) {
	if c, ok := m.resolved.Load(k); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	b := k.b
	if k.n >= 0 {
		b = strconv.Itoa(k.n)
	}
	c := k.vec.WithLabelValues(k.a, b)
	m.resolved.Store(k, c)
	c.Inc()
}

type requestKey struct {
	method, path string
	status       int
}

type requestChildren struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// Request counts a request and its duration under its route's
// labels, resolving them once per route and status.
func (m *Metrics) Request(method, path string, status int, d time.Duration) {
	k := requestKey{method, path, status}
	c, ok := m.children.Load(k)
	if !ok {
		ch := requestChildren{count: m.requests.WithLabelValues(method, path, strconv.Itoa(status))}
		if d >= 0 { // refused requests are counted, not timed
			ch.duration = m.duration.WithLabelValues(method, path)
		}
		c, _ = m.children.LoadOrStore(k, ch)
	}
	ch := c.(requestChildren)
	ch.count.Inc()
	if d >= 0 && ch.duration != nil {
		ch.duration.Observe(d.Seconds())
	}
}

// Call counts a proxied business call by method and the status the
// caller got, and its retry after a 401.
func (m *Metrics) Call(method string, status int, retried bool) {
	m.incStatus(m.calls, method, status)
	if retried {
		m.retries.WithLabelValues(method).Inc()
	}
}

// Authorization counts an authorization by scheme and result:
// cached, obtained or failed.
func (m *Metrics) Authorization(scheme string, cached bool, err error) {
	result := "obtained"
	switch {
	case err != nil:
		result = "failed"
	case cached:
		result = "cached"
	}
	m.inc(m.authz, scheme, result)
}

// Refresh counts a scheme's refresh by result (ok, refused, error).
func (m *Metrics) Refresh(scheme, result string) {
	if v := m.refreshes[scheme]; v != nil {
		v.WithLabelValues(result).Inc()
	}
}

// New are the agent's metrics over the token manager tm (nil: no token,
// and no token metrics), those of the schemes from list, with the gauges
// probes reads at each scrape.
func New(tm *tokenq.Manager, build Build, list []schemes.Entry, probes Probes) *Metrics {
	m := &Metrics{
		reg:     prometheus.NewRegistry(),
		tm:      tm,
		formats: newStoreFormats(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "signagent_requests_total", Help: "HTTP requests by method, route (the path of a known route, other or refused) and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "signagent_request_duration_seconds", Help: "HTTP request latency by method and route.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"}),
		signing: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "signagent_sign_duration_seconds", Help: "Time the token took to sign (CMS included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		signErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "signagent_sign_errors_total",
			Help: "Token signatures that failed, by reason: pin (refused, missing or its last try), pin_locked, timeout (the token's deadline), device (removed, lost, a device error: the agent reconnects), other."}, []string{"reason"}),
		cacheHits:   prometheus.NewCounter(prometheus.CounterOpts{Name: "signagent_session_cache_hits_total", Help: "Sessions answered from the cache."}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{Name: "signagent_session_cache_misses_total", Help: "Sessions that ran the flow."}),
		rejected:    prometheus.NewCounter(prometheus.CounterOpts{Name: "signagent_queue_rejected_total", Help: "Requests refused with 429 because the token's queue was full."}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "signagent_service_calls_total",
			Help: "Business calls through the proxy by method and the status the caller got (the service's, or the agent's own error)."}, []string{"method", "status"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "signagent_service_retries_total",
			Help: "Business calls through the proxy sent again with a fresh Authorization after a 401."}, []string{"method"}),
		authz: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "signagent_authorizations_total",
			Help: "Authorization header values by scheme and result (cached, obtained, failed)."}, []string{"scheme", "result"}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "signagent_sessions_total",
			Help: "Trusted sessions handed out by where they came from: memory (this agent's), store (another agent's login, through the shared store), login (a trusted authentication just now)."},
			[]string{"source"}),
		sources: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "signagent_authorization_sources_total",
			Help: "Authorization header values handed out by scheme and where they came from: memory (this agent's), store (the token store or the shared store: another process's login), login or refresh (just now)."},
			[]string{"scheme", "source"}),
		storeOps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "signagent_store_operations_total",
			Help: "Shared store operations (get, put, delete, acquire, ping, convert: a record rewritten in an older format for an older agent, once: a certificate login's key transport marked) by result (ok, not_found, sealed: a value that did not open, too_large: a value over the size bound, not read, rollback: a record older than one seen, format_newer: a record of a format newer than this agent reads, fenced, waited: a lease another agent held, seen: marked before, unavailable)."},
			[]string{"op", "result"}),
		certLogins: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "signagent_certificate_logins_total",
			Help: "Legacy certificate logins by outcome (ok; backoff: not tried, a failure's wait not over; not_challenge, replayed: the API's answer refused before the token was asked; store_unavailable; not_opened; refused: AuthenticateConfirm refused; error)."},
			[]string{"outcome"}),
	}
	for _, o := range legacy.CertOutcomes {
		m.certLogins.WithLabelValues(o)
	}
	// Label sets known in advance start at zero, so that alerts have
	// series from the first scrape.
	for _, s := range []string{trusted.FromMemory, trusted.FromStore, trusted.FromLogin} {
		m.sessions.WithLabelValues(s)
	}
	m.refreshes = map[string]*prometheus.CounterVec{}
	for _, e := range list {
		for _, source := range e.Sources {
			m.sources.WithLabelValues(e.Name, source)
		}
		for _, result := range []string{"cached", "obtained", "failed"} {
			m.authz.WithLabelValues(e.Name, result)
		}
		if e.Refreshes == "" {
			continue
		}
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "signagent_" + strings.ReplaceAll(e.Name, "-", "_") + "_refreshes_total",
			Help: e.Refreshes + " by result (ok, refused: sign in again, error)."}, []string{"result"})
		for _, result := range []string{"ok", "refused", "error"} {
			v.WithLabelValues(result)
		}
		m.refreshes[e.Name] = v
		m.reg.MustRegister(v)
	}
	if build.Version == "" {
		build.Version = "dev"
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "signagent_build_info",
		Help:        "Always 1; the labels say which build is running: version, revision (the commit, as signagent version --json's commit) and goversion.",
		ConstLabels: prometheus.Labels{"version": build.Version, "goversion": runtime.Version(), "revision": build.Commit}})
	info.Set(1)
	m.reg.MustRegister(info, stateCollector{m: m, probes: probes}, m.formats, m.calls, m.retries, m.authz, m.requests, m.duration, m.storeOps, m.certLogins, m.sessions, m.sources,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if tm == nil {
		return m // no token: no token metrics, rather than a token that is never ready
	}
	for _, r := range signReasons {
		m.signErrors.WithLabelValues(r)
	}
	m.reg.MustRegister(m.signing, m.signErrors, m.cacheHits, m.cacheMisses, m.rejected,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "signagent_token_ready", Help: "1 when the token is logged in and the key found."},
			func() float64 {
				if tm.State().Ready {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "signagent_queue_depth", Help: "Token operations waiting or running."},
			func() float64 { return float64(tm.QueueDepth()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "signagent_queue_dropped_total", Help: "Requests dropped because their deadline passed while they waited."},
			func() float64 { return float64(tm.Dropped()) }),
	)
	return m
}

// Sign records a token signature (the token manager's OnSign).
func (m *Metrics) Sign(d time.Duration, err error) {
	m.signing.Observe(d.Seconds())
	if err != nil {
		m.signErrors.WithLabelValues(signReason(err)).Inc()
	}
}

// Handler serves the metrics in Prometheus's text.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Source counts a header value handed out by scheme and where it came
// from.
func (m *Metrics) Source(scheme, source string) { m.inc(m.sources, scheme, source) }

// Session counts a trusted session handed out by where it came from
// (trusted.FromMemory, FromStore or FromLogin: a miss).
func (m *Metrics) Session(source string) {
	if source != trusted.FromLogin {
		m.cacheHits.Inc()
	} else {
		m.cacheMisses.Inc()
	}
	m.sessions.WithLabelValues(source).Inc()
}

// CertLogin counts a legacy certificate login by outcome.
func (m *Metrics) CertLogin(outcome string) { m.certLogins.WithLabelValues(outcome).Inc() }

// StoreOp counts a shared store's operation by result.
func (m *Metrics) StoreOp(op, result string) { m.storeOps.WithLabelValues(op, result).Inc() }

// Rejected counts a request refused because the token's queue was full.
func (m *Metrics) Rejected() { m.rejected.Inc() }

// signReasons are the reason labels of signagent_sign_errors_total.
var signReasons = []string{"pin", "pin_locked", "timeout", "device", "other"}

// signReason is why a token signature failed, as an operator acts on it.
func signReason(err error) string {
	switch {
	case errors.Is(err, tokenerr.ErrPINLocked):
		return "pin_locked"
	case errors.Is(err, tokenerr.ErrPINIncorrect), errors.Is(err, tokenerr.ErrPINMissing), errors.Is(err, tokenerr.ErrPINFinalTry):
		return "pin"
	case errors.Is(err, tokenerr.ErrTokenTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errdefs.ErrTimeout):
		return "timeout"
	case tokenerr.Recoverable(err):
		return "device"
	}
	return "other"
}
