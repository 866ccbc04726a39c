package health

import (
	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/store"
)

// Parts are the agent's own parts that its readiness reads.
type Parts struct {
	// Token is the agent's token, nil when the agent does not sign.
	Token *tokenq.Manager
	// Shared is the shared store, nil without one.
	Shared store.Records
	// Schemes are the schemes the agent serves; each that can say
	// (schemes.Checker) is checked.
	Schemes authz.Schemes
}

// Report checks each part of the agent (the token only when the agent
// signs, each scheme that can say) and reports what deps last saw of each
// shared dependency: the store (probed in the background, never waited
// for here), the service and the identity provider (as their last calls
// went). Only the agent's own parts make it not ready: a dependency fails
// every agent alike, and an agent that leaves the Service for it serves
// no one (each still answers what it holds); it makes the agent
// degraded.
func Report(p Parts, deps *Dependencies) agentapi.ReadyResponse {
	resp := agentapi.ReadyResponse{Status: agentapi.StatusReady, Checks: map[string]agentapi.Check{}}
	if p.Token != nil {
		st := p.Token.State()
		resp.Token = agentapi.TokenState(st)
		resp.Checks["token"] = agentapi.Check{Ready: st.Ready, Reason: st.Reason}
		resp.Queue = &agentapi.QueueState{Depth: p.Token.QueueDepth(), Dropped: int(p.Token.Dropped())}
	}
	if p.Shared != nil {
		resp.StoreFormats = storeFormats(p.Shared)
	}
	for _, sc := range p.Schemes {
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

	if p.Shared != nil {
		c := agentapi.Check{Ready: false, Reason: "the shared store is not checked yet", Dependency: true}
		if s, ok := deps.Get(Store); ok {
			c = agentapi.Check{Ready: s.Up, Reason: s.Reason, Dependency: true}
		}
		resp.Checks[Store] = c
	}
	for _, name := range []string{Service, IdP} {
		if s, ok := deps.Get(name); ok {
			resp.Checks[name] = agentapi.Check{Ready: s.Up, Reason: s.Reason, Dependency: true}
		}
	}
	for _, c := range resp.Checks {
		if !c.Ready && c.Dependency && resp.Status == agentapi.StatusReady {
			resp.Status = agentapi.StatusDegraded
		}
	}
	return resp
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
