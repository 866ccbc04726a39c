package agent

import (
	"context"
	"net/http"
	"time"

	"github.com/signagent/signagent/api"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/store"
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
// signs, the shared store, and each scheme that can say (schemes.Checker).
func (a *Agent) readiness() api.ReadyResponse {
	resp := api.ReadyResponse{Status: "ready", Checks: map[string]api.Check{}}
	if a.tm != nil {
		st := a.tm.State()
		resp.Token = api.TokenState(st)
		resp.Checks["token"] = api.Check{Ready: st.Ready, Reason: st.Reason}
		resp.Queue = &api.QueueState{Depth: a.tm.QueueDepth(), Dropped: int(a.tm.Dropped())}
	}

	st := a.now()
	if st.shared != nil {
		// The shared store (every scheme's records), pinged once.
		c := api.Check{Ready: true}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := st.shared.Ping(ctx); err != nil {
			c = api.Check{Reason: err.Error()}
		}
		cancel()
		resp.Checks["store"] = c
		resp.StoreFormats = storeFormats(st.shared)
	}
	for _, sc := range st.schemes {
		// Each scheme that can say, under its name (one not configured
		// cannot, and is left out).
		if ch, ok := sc.(schemes.Checker); ok {
			c := api.Check{Ready: true}
			if err := ch.Check(); err != nil {
				c = api.Check{Reason: err.Error()}
			}
			resp.Checks[sc.Name()] = c
		}
	}
	for _, c := range resp.Checks {
		if !c.Ready {
			resp.Status = "not ready"
		}
	}
	return resp
}

// storeFormats are the formats a shared store reads and writes (nil for
// a store that cannot say).
func storeFormats(r store.Records) *api.StoreFormats {
	f, ok := r.(interface{ Formats() store.Formats })
	if !ok {
		return nil
	}
	got := f.Formats()
	return &api.StoreFormats{Read: got.Read, Write: got.Write, Agents: got.Agents}
}
