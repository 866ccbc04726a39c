package metrics

import (
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/signagent/signagent/internal/httpx"
)

// Probes are what the metrics read from the agent at each scrape, for the
// gauges that say when something will stop working: each nil one (or one
// with nothing to say) exports no series rather than a made-up value.
type Probes struct {
	// RefreshExpiries is, by OpenID Connect profile this agent holds,
	// when the profile will have to sign in again (oidc.Tokens).
	RefreshExpiries func() map[string]time.Time
}

var (
	refreshExpiryDesc = prometheus.NewDesc("signagent_oidc_refresh_expiry_timestamp_seconds",
		"When an OpenID Connect profile this agent holds must sign in again (Unix time): its refresh token's expiry (issued at sign-in or at the refresh that returned a new one, plus --refresh-token-lifetime), or its access token's without a refresh token.",
		[]string{"profile"}, nil)
	certExpiryDesc = prometheus.NewDesc("signagent_certificate_expiry_timestamp_seconds",
		"When the token's signing certificate expires (Unix time, its notAfter); absent while the token is not ready.", nil, nil)
	skewDesc = prometheus.NewDesc("signagent_service_clock_skew_seconds",
		"The service's clock minus this machine's, from the Date header of the service's last answer (1 s resolution); absent before the first answer.", nil, nil)
)

// stateCollector exports the Probes' gauges and the clock skew.
type stateCollector struct {
	m      *Metrics
	probes Probes
}

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{refreshExpiryDesc, certExpiryDesc, skewDesc} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	if f := c.probes.RefreshExpiries; f != nil {
		for profile, at := range f() {
			ch <- prometheus.MustNewConstMetric(refreshExpiryDesc, prometheus.GaugeValue, unixSeconds(at), profile)
		}
	}
	if cert := c.m.tm.Certificate(); cert != nil {
		ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, unixSeconds(cert.NotAfter))
	}
	if c.m.skewSeen.Load() {
		ch <- prometheus.MustNewConstMetric(skewDesc, prometheus.GaugeValue, time.Duration(c.m.skew.Load()).Seconds())
	}
}

func unixSeconds(t time.Time) float64 {
	return math.Round(float64(t.UnixMilli())) / 1000
}

// serviceDate is a Date header and its time.
type serviceDate struct {
	header string
	t      time.Time
}

// ServiceDate records the service's clock against this machine's: date is
// an answer's Date header (empty or unreadable: ignored), at when its
// headers arrived here, as httpx.ClockSkew measures it (at taken to the
// whole second, so that a clock in step reads 0, or -1 s for an answer
// that crossed a second). The header is parsed when it differs from the
// last one; nothing is allocated otherwise.
func (m *Metrics) ServiceDate(date string, at time.Time) {
	if date == "" {
		return
	}
	last := m.date.Load()
	if last == nil || last.header != date {
		t, err := http.ParseTime(date)
		if err != nil {
			return
		}
		last = &serviceDate{header: date, t: t}
		m.date.Store(last)
	}
	m.skew.Store(int64(httpx.SkewAt(last.t, at)))
	m.skewSeen.Store(true)
}
