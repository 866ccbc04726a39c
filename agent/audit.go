package agent

import (
	"github.com/signagent/signagent/agent/auditlog"
	"github.com/signagent/signagent/legacy"
)

// certLogin records a certificate login of the legacy scheme: an audit
// line (the certificate, a hash of the challenge's key transport, the
// outcome), its count by outcome, and a warning for one refused before
// the token was asked, which a genuine service never causes.
func (a *Agent) certLogin(l legacy.CertLogin) {
	a.audit.Write(auditlog.Entry{Caller: "agent", Operation: "certificate_login", Outcome: l.Outcome, Latency: l.Latency,
		Scheme: "legacy", Identity: "certificate " + l.Thumbprint, Thumbprint: l.Thumbprint, Transport: l.Transport})
	a.metrics.CertLogin(l.Outcome)
	switch l.Outcome {
	case legacy.CertReplayed, legacy.CertNotChallenge:
		a.cfg.Log.Warn().Str("certificate", l.Thumbprint).Str("keyTransport", l.Transport).Str("outcome", l.Outcome).
			Msg("the business API sent a certificate login something that is not a fresh challenge; the token was not asked")
	}
}
