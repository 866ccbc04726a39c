package agent

import (
	"maps"
	"net/http"
	"time"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/store"
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

// readiness checks each part of this agent, the token only when the agent
// signs and each scheme that can say (schemes.Checker), and reports what
// it last saw of each shared dependency: the store (probed in the
// background, never waited for here), the service and the identity
// provider (as their last calls went). Only the agent's own parts make it
// not ready: a dependency fails every agent alike, and an agent that
// leaves the Service for it serves no one (each still answers what it
// holds); it makes the agent degraded.
func (a *Agent) readiness() agentapi.ReadyResponse {
	resp := agentapi.ReadyResponse{Status: agentapi.StatusReady, Checks: map[string]agentapi.Check{}}
	if a.tm != nil {
		st := a.tm.State()
		resp.Token = agentapi.TokenState(st)
		resp.Checks["token"] = agentapi.Check{Ready: st.Ready, Reason: st.Reason}
		resp.Queue = &agentapi.QueueState{Depth: a.tm.QueueDepth(), Dropped: int(a.tm.Dropped())}
	}

	st := a.now()
	if st.shared != nil {
		resp.StoreFormats = storeFormats(st.shared)
	}
	for _, sc := range st.schemes {
		// Each scheme that can say, under its name (one not configured
		// cannot, and is left out).
		if ch, ok := sc.(schemes.Checker); ok {
			c := agentapi.Check{Ready: true}
			if err := ch.Check(); err != nil {
				c = agentapi.Check{Reason: err.Error()}
			}
			resp.Checks[sc.Name()] = c
		}
	}
	for _, c := range resp.Checks {
		if !c.Ready {
			resp.Status = agentapi.StatusNotReady
		}
	}

	if st.shared != nil {
		c := agentapi.Check{Ready: false, Reason: "the shared store is not checked yet", Dependency: true}
		if s, ok := a.deps.get(depStore); ok {
			c = agentapi.Check{Ready: s.up, Reason: s.reason, Dependency: true}
		}
		resp.Checks[depStore] = c
	}
	for _, name := range []string{depService, depIdP} {
		if s, ok := a.deps.get(name); ok {
			resp.Checks[name] = agentapi.Check{Ready: s.up, Reason: s.reason, Dependency: true}
		}
	}
	for _, c := range resp.Checks {
		if !c.Ready && c.Dependency && resp.Status == agentapi.StatusReady {
			resp.Status = agentapi.StatusDegraded
		}
	}
	return resp
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

// storeFormats are the formats a shared store reads and writes (nil for
// a store that cannot say).
func storeFormats(r store.Records) *agentapi.StoreFormats {
	f, ok := r.(interface{ Formats() store.Formats })
	if !ok {
		return nil
	}
	got := f.Formats()
	return &agentapi.StoreFormats{Read: got.Read, Write: got.Write, Agents: got.Agents}
}
