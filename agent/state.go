package agent

import (
	"sync"
	"time"

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
	shared *store.Redis
	target *proxyTarget
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
	a.cur.Store(&next)
}

// reload publishes a whole new state at once (Daemon.Reload builds it),
// after pointing what it holds at its shared store, then the session
// cache at the new store and API key.
func (a *Agent) reload(next state, sessionTTL time.Duration) {
	a.writer.mu.Lock()
	if next.shared != a.cur.Load().shared {
		a.observeStore(next.shared)
	}
	if next.legacy != nil && next.legacy.Tokens != nil {
		next.legacy.Tokens.Share(next.shared)
	}
	a.cur.Store(&next)
	a.writer.mu.Unlock()
	a.cache.Share(next.shared, next.key)
	a.cache.SetTTL(sessionTTL)
}
