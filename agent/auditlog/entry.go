package auditlog

import (
	"io"
	"time"

	"github.com/rs/zerolog"
)

// Writer writes one JSON line per operation, apart from the diagnostic
// log: who asked, what, for which credential (masked), with which key,
// how it ended and how long it took. It never holds a secret. A nil
// Writer writes nothing.
type Writer struct {
	log zerolog.Logger
}

// NewWriter returns an audit log writing JSON lines to w (a File, or
// standard error).
func NewWriter(w io.Writer) *Writer {
	return &Writer{log: zerolog.New(w).With().Timestamp().Logger()}
}

// Entry is one operation; an empty field is left out of its line.
type Entry struct {
	Caller      string // the client that asked
	Operation   string // a route, "service" for a proxied call, "certificate_login"
	Kind        string // the credential's kind
	Credential  string // masked
	Thumbprint  string // the key's certificate
	Outcome     string // "ok" or an error code
	ServiceCode string // the service's own error code
	Cached      *bool
	Source      string        // where a session or header came from: memory, store (another process), login or refresh
	Latency     time.Duration // how long the operation took
	Scheme      string        // of an authorization
	Identity    string        // who it is for, without a secret
	Call        string        // a proxied business call: "GET /GetMyOrganizations"
	Status      int           // the service's answer to it
	Retried     bool          // after a 401 to the cached header
	RequestID   string        // X-Request-Id
	Transport   string        // a certificate login's key transport (a hash's first bytes)
}

// Write writes e's line.
func (a *Writer) Write(e Entry) {
	if a == nil {
		return
	}
	ev := a.log.Log().Str("caller", e.Caller).Str("operation", e.Operation).Str("outcome", e.Outcome).
		Float64("latencyMs", float64(e.Latency.Microseconds())/1000)
	if e.RequestID != "" {
		ev = ev.Str("requestId", e.RequestID)
	}
	if e.Kind != "" {
		ev = ev.Str("credentialKind", e.Kind).Str("credential", e.Credential)
	}
	if e.Scheme != "" {
		ev = ev.Str("scheme", e.Scheme).Str("identity", e.Identity)
	}
	if e.Thumbprint != "" {
		ev = ev.Str("keyThumbprint", e.Thumbprint)
	}
	if e.Transport != "" {
		ev = ev.Str("keyTransport", e.Transport)
	}
	if e.ServiceCode != "" {
		ev = ev.Str("serviceCode", e.ServiceCode)
	}
	if e.Call != "" {
		ev = ev.Str("call", e.Call)
	}
	if e.Status != 0 {
		ev = ev.Int("serviceStatus", e.Status)
	}
	if e.Retried {
		ev = ev.Bool("retried", true)
	}
	if e.Cached != nil {
		ev = ev.Bool("cached", *e.Cached)
	}
	if e.Source != "" {
		ev = ev.Str("from", e.Source)
	}
	ev.Send()
}
