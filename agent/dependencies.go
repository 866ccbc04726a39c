package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/signagent/signagent/agent/metrics"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

// The shared dependencies: parts that every agent of a fleet uses, so
// that one failing fails them all alike. Readiness does not depend on
// them (an agent leaving the Service for the store's outage serves no one
// better, and a fleet would leave it at once): /readyz answers "degraded"
// and names the failing one, and signagent_dependency_up says it.
const (
	depStore   = metrics.DependencyStore
	depService = metrics.DependencyService
	depIdP     = metrics.DependencyIdP
)

// depState is what the agent last saw of a dependency.
type depState struct {
	up     bool
	reason string
}

// dependencies is the state of each shared dependency: the store's from
// its probe (probeStore), the service's and the identity provider's from
// the calls made to them (a passive check: a dependency not called yet is
// not reported). Every proxied call reports the service, so the state is
// a snapshot read without a lock and replaced only when it changes: the
// calls of a fleet's busiest path do not meet on one mutex.
type dependencies struct {
	mu   sync.Mutex // serializes the writers
	seen atomic.Pointer[map[string]depState]
}

// snapshot is the state as last written (nil before anything was seen).
func (d *dependencies) snapshot() map[string]depState {
	if p := d.seen.Load(); p != nil {
		return *p
	}
	return nil
}

// set records dependency name as up (err nil) or down for err's reason.
func (d *dependencies) set(name string, err error) {
	s := depState{up: err == nil}
	if err != nil {
		s.reason = firstLine(err.Error())
	}
	if cur, ok := d.snapshot()[name]; ok && cur == s {
		return // as already seen: nothing to write
	}
	d.change(func(m map[string]depState) { m[name] = s })
}

// change replaces the snapshot with a copy that f changed.
func (d *dependencies) change(f func(map[string]depState)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := maps.Clone(d.snapshot())
	if next == nil {
		next = map[string]depState{}
	}
	f(next)
	d.seen.Store(&next)
}

// forget drops what was seen of name (a store no longer configured).
func (d *dependencies) forget(name string) {
	d.change(func(m map[string]depState) { delete(m, name) })
}

// get is what was last seen of name, and whether anything was.
func (d *dependencies) get(name string) (depState, bool) {
	s, ok := d.snapshot()[name]
	return s, ok
}

// up reports each dependency seen, for the metrics.
func (d *dependencies) up() map[string]bool {
	seen := d.snapshot()
	out := make(map[string]bool, len(seen))
	for k, s := range seen {
		out[k] = s.up
	}
	return out
}

// unanswered says whether err is a dependency that did not answer, or
// answered with a failure of its own (unreachable, a time-out, a 5xx):
// not the caller's fault nor a refusal.
func unanswered(err error) bool {
	switch errdefs.Kind(err) {
	case errdefs.ErrUnreachable, errdefs.ErrTimeout, errdefs.ErrFailing:
		return true
	}
	return false
}

// storeProbeEvery is how often the agent checks its shared store.
const storeProbeEvery = time.Second

// probeStore checks the shared store every storeProbeEvery, and at once
// when a reload publishes another (kick), until stop is closed: a write (a lease of the agent's own taken and given back), not
// only a ping, so that a store that answers but refuses writes (too few
// replicas: NOREPLICAS, a read-only replica, out of memory), where no
// refresh can take its lease, is seen down too. /readyz reads the result
// and never waits for the store itself.
func (a *Agent) probeStore(stop <-chan struct{}, kick <-chan struct{}) {
	t := time.NewTicker(storeProbeEvery)
	defer t.Stop()
	for {
		a.checkStore()
		select {
		case <-stop:
			return
		case <-t.C:
		case <-kick:
		}
	}
}

// checkStore probes the current shared store once: a ping (of every
// node, where the store is several), then a lease of its own: a new one each time, so that one a failed probe left behind (taken
// as the store stopped answering, never given back) is not waited for; it
// expires on its own.
func (a *Agent) checkStore() {
	s := a.now().shared
	if s == nil {
		a.deps.forget(depStore)
		return
	}
	b := make([]byte, 8)
	rand.Read(b)
	id := "agent-" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), storeProbeEvery)
	defer cancel()
	err := s.Ping(ctx) // every node, where the store is several
	if err == nil {
		var l store.Lease
		if l, err = s.Acquire(ctx, probeKind, id); err == nil {
			l.Release()
		}
	}
	if err != nil && !errors.Is(err, store.ErrUnavailable) {
		// One line (set keeps the first): the cause in it, not after it.
		err = fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	a.deps.set(depStore, err)
}

// probeKind is the kind of the probe's lease in the store: no record of
// that kind is ever written.
const probeKind = "probe"

// saw records a call to dependency name: up when err is nil, down when it
// did not answer or failed (unanswered); a refusal, or an error before the
// call (the token, the caller's input), says nothing of it.
func (a *Agent) saw(name string, err error) {
	switch {
	case err == nil:
		a.deps.set(name, nil)
	case unanswered(err):
		a.deps.set(name, err)
	}
}

// sawHeader records what obtaining an Authorization header of scheme
// said of a dependency: a refresh at the identity provider (OpenID
// Connect), a login at the service (the others); from memory or the
// store, nothing was called.
func (a *Agent) sawHeader(scheme, source string, err error) {
	dep := depService
	if scheme == authz.SchemeOIDC {
		dep = depIdP
	}
	switch {
	case err != nil:
		a.saw(dep, err)
	case source == oidc.FromRefresh, source == trusted.FromLogin:
		a.saw(dep, nil)
	}
}

// login is a trusted authentication at the service, recorded.
func (a *Agent) login(ctx context.Context, c *trusted.Client, cred canonical.Credential, userID string) (*trusted.Session, error) {
	s, err := c.Session(ctx, cred, userID)
	a.saw(depService, err)
	return s, err
}
