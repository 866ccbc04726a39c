package agent

import (
	"maps"
	"net/http"
	"time"

	"github.com/signagent/signagent/agent/health"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/schemes"
)

// healthz (and /livez) is the process check: the agent serves at all.
func (a *Agent) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, agentapi.HealthResponse{Status: "ok"})
}

// readyz is 200 while the agent can serve (ready, or degraded: a shared
// dependency fails), 503 when one of its own parts cannot.
func (a *Agent) readyz(w http.ResponseWriter, r *http.Request) {
	resp := a.readiness()
	if resp.Status != agentapi.StatusNotReady {
		writeJSON(w, http.StatusOK, resp)
		return
	}
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, resp)
}

// readiness is the agent's readiness report (health.Report) over its
// token, its current state's store and schemes, and what it last saw of
// the shared dependencies.
func (a *Agent) readiness() agentapi.ReadyResponse {
	st := a.now()
	return health.Report(health.Parts{Token: a.tm, Shared: st.shared, Schemes: st.schemes}, &a.deps)
}

// refreshExpiries is, by identity of each scheme that can tell
// (schemes.Expirer), when it must sign in again (the metrics' gauge).
func (a *Agent) refreshExpiries() map[string]time.Time {
	out := map[string]time.Time{}
	st := a.now()
	if st == nil {
		return out
	}
	for _, sc := range st.schemes {
		if e, ok := sc.(schemes.Expirer); ok {
			maps.Copy(out, e.RefreshExpiries())
		}
	}
	return out
}
