package agent

import (
	"time"

	"github.com/signagent/signagent/agent/access"
	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

// state is what a reload replaces: every reloadable setting of the agent,
// immutable once published, swapped whole behind one atomic pointer, so
// that a reader sees one configuration (never a new API key with the old
// client, or new route rules with the old policy).
type state struct {
	key    string
	client *trusted.Client
	rules  []access.RouteRule
	policy Policy
	shared store.Records
	target *proxy.Target
	// schemes are the schemes /v1/authorizations and the proxy serve,
	// built once for the state (Daemon.state) rather than on every
	// authorization and proxied call.
	schemes authz.Schemes
}

// now is the current state.
func (a *Agent) now() *state { return a.cur.Load() }

// reload publishes a whole new state at once (the daemon builds it, at
// start and on reload, in Daemon.state).
func (a *Agent) reload(next *state, sessionTTL time.Duration) {
	a.writer.Lock()
	defer a.writer.Unlock()
	was := a.cur.Load().target
	a.publish(next)
	a.cache.SetTTL(sessionTTL)
	if was != nil && was != next.target {
		was.CloseIdle() // the old address's kept connections
	}
}

// publish plugs next's shared store into the trusted sessions for next's
// API key (the schemes were lent it when they were built), then swaps
// next in. The caller holds a.writer.
func (a *Agent) publish(next *state) {
	changed := next.shared != a.cur.Load().shared
	if changed {
		a.observeStore(next.shared)
		a.announce(next.shared)
	}
	a.cache.Share(next.shared, next.key)
	a.cur.Store(next)
	if changed {
		// The last store's probe result stands until the new store's first
		// probe, asked for now: a reload (SIGHUP reopens the store even when
		// nothing of it changed) neither makes /readyz "not checked yet" nor
		// drops signagent_store_up meanwhile. No store at all is forgotten
		// by the probe.
		select {
		case a.kick <- struct{}{}:
		default: // a probe is asked for already
		}
	}
}
