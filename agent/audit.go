package agent

import (
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/legacy"
)

// Audit writes one JSON line per operation, apart from the diagnostic log:
// who asked, what, for which credential (masked), with which key, how it
// ended and how long it took. It never holds a secret.
type Audit struct {
	log zerolog.Logger
}

// NewAudit returns an audit log writing JSON lines to w.
func NewAudit(w io.Writer) *Audit {
	return &Audit{log: zerolog.New(w).With().Timestamp().Logger()}
}

// auditEntry is one operation.
type auditEntry struct {
	caller      string
	operation   string
	kind        string
	credential  string // masked
	thumbprint  string
	outcome     string // "ok" or an error code
	serviceCode string
	cached      *bool
	source      string // where a session or header came from: memory, store (another process), login or refresh
	latency     time.Duration
	scheme      string // of an authorization
	identity    string // who it is for, without a secret
	call        string // a proxied business call: "GET /GetMyOrganizations"
	status      int    // the service's answer to it
	retried     bool   // after a 401 to the cached header
	requestID   string // X-Request-Id
	transport   string // a certificate login's key transport (a hash's first bytes)
}

func (a *Audit) write(e auditEntry) {
	if a == nil {
		return
	}
	ev := a.log.Log().Str("caller", e.caller).Str("operation", e.operation).Str("outcome", e.outcome).
		Float64("latencyMs", float64(e.latency.Microseconds())/1000)
	if e.requestID != "" {
		ev = ev.Str("requestId", e.requestID)
	}
	if e.kind != "" {
		ev = ev.Str("credentialKind", e.kind).Str("credential", e.credential)
	}
	if e.scheme != "" {
		ev = ev.Str("scheme", e.scheme).Str("identity", e.identity)
	}
	if e.thumbprint != "" {
		ev = ev.Str("keyThumbprint", e.thumbprint)
	}
	if e.transport != "" {
		ev = ev.Str("keyTransport", e.transport)
	}
	if e.serviceCode != "" {
		ev = ev.Str("serviceCode", e.serviceCode)
	}
	if e.call != "" {
		ev = ev.Str("call", e.call)
	}
	if e.status != 0 {
		ev = ev.Int("serviceStatus", e.status)
	}
	if e.retried {
		ev = ev.Bool("retried", true)
	}
	if e.cached != nil {
		ev = ev.Bool("cached", *e.cached)
	}
	if e.source != "" {
		ev = ev.Str("from", e.source)
	}
	ev.Send()
}

// certLogin records a certificate login of the legacy scheme: an audit
// line (the certificate, a hash of the challenge's key transport, the
// outcome), its count by outcome, and a warning for one refused before
// the token was asked, which a genuine service never causes.
func (a *Agent) certLogin(l legacy.CertLogin) {
	a.audit.write(auditEntry{caller: "agent", operation: "certificate_login", outcome: l.Outcome, latency: l.Latency,
		scheme: "legacy", identity: "certificate " + l.Thumbprint, thumbprint: l.Thumbprint, transport: l.Transport})
	a.metrics.CertLogin(l.Outcome)
	switch l.Outcome {
	case legacy.CertReplayed, legacy.CertNotChallenge:
		a.cfg.Log.Warn().Str("certificate", l.Thumbprint).Str("keyTransport", l.Transport).Str("outcome", l.Outcome).
			Msg("the business API sent a certificate login something that is not a fresh challenge; the token was not asked")
	}
}
