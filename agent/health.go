package agent

import (
	"net/http"

	"github.com/signagent/signagent/api"
	"github.com/signagent/signagent/oidc"
)

func (a *Agent) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.HealthResponse{Status: "ok"})
}

func (a *Agent) readyz(w http.ResponseWriter, r *http.Request) {
	resp := a.readiness()
	if resp.Status == "ready" {
		writeJSON(w, http.StatusOK, resp)
		return
	}
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, resp)
}

// readiness checks each configured part: the token only when the agent
// signs, OpenID Connect's token store, the legacy scheme.
func (a *Agent) readiness() api.ReadyResponse {
	resp := api.ReadyResponse{Status: "ready", Checks: map[string]api.Check{}}
	if a.tm != nil {
		st := a.tm.State()
		resp.Token = api.TokenState(st)
		resp.Checks["token"] = api.Check{Ready: st.Ready, Reason: st.Reason}
		resp.Queue = &api.QueueState{Depth: a.tm.QueueDepth(), Dropped: int(a.tm.Dropped())}
	}

	if t := a.now().oidc; t != nil {
		c := api.Check{Ready: true}
		if err := t.Store.Check(); err != nil {
			c = api.Check{Reason: err.Error()}
		}
		if _, shared := t.Store.(*oidc.Shared); shared {
			// The shared store, pinged; OpenID Connect itself needs nothing
			// more to serve.
			resp.Checks["store"] = c
			c = api.Check{Ready: true}
		}
		resp.Checks["oidc"] = c
	}
	if a.now().legacy != nil {
		resp.Checks["legacy"] = api.Check{Ready: true}
	}
	for _, c := range resp.Checks {
		if !c.Ready {
			resp.Status = "not ready"
		}
	}
	return resp
}
