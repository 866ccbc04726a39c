package agent

import (
	"sync"
	"time"

	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/oidc"
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
	rules  []RouteRule
	policy Policy
	legacy *Legacy
	oidc   *oidc.Tokens
	more   authz.Schemes // Config.Schemes
	shared store.Records
	target *proxy.Target

	// schemes are the schemes the rest configures, built once when the
	// state is published rather than on every authorization and proxied
	// call.
	schemes authz.Schemes
}

// now is the current state.
func (a *Agent) now() *state { return a.cur.Load() }

// stateWriter serializes the writers of the state (start, reload, tests);
// readers never wait.
type stateWriter struct{ mu sync.Mutex }

// update publishes a copy of the current state changed by change.
func (a *Agent) update(change func(s *state)) {
	a.writer.mu.Lock()
	defer a.writer.mu.Unlock()
	next := *a.cur.Load()
	change(&next)
	a.publish(&next)
}

// reload publishes a whole new state at once (Daemon.Reload builds it).
func (a *Agent) reload(next state, sessionTTL time.Duration) {
	a.writer.mu.Lock()
	defer a.writer.mu.Unlock()
	a.publish(&next)
	a.cache.SetTTL(sessionTTL)
}

// publish plugs next's shared store into the caches that keep records
// there (the legacy tokens, and the trusted sessions for next's API key):
// the one place the agent plugs a store in. Then it swaps next in. The
// caller holds a.writer.
func (a *Agent) publish(next *state) {
	if next.shared != a.cur.Load().shared {
		a.observeStore(next.shared)
	}
	if next.legacy != nil && next.legacy.Tokens != nil {
		next.legacy.Tokens.Share(next.shared)
	}
	a.cache.Share(next.shared, next.key)
	next.schemes = a.buildSchemes(next)
	a.cur.Store(next)
}
