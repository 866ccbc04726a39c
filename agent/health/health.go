// Package health is what an agent reports of its own state: the shared
// dependencies (the store, the service, the identity provider) as it last
// saw them, and the readiness report /readyz answers with (Report): not
// ready only for the agent's own parts (its token, a scheme that cannot
// serve), degraded for a shared dependency that fails. The agent feeds it
// (its store probe, the calls it makes) and serves what it says.
package health

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/signagent/signagent/agent/metrics"
	"github.com/signagent/signagent/errdefs"
)

// The shared dependencies: parts that every agent of a fleet uses, so
// that one failing fails them all alike. Readiness does not depend on
// them (an agent leaving the Service for the store's outage serves no one
// better, and a fleet would leave it at once): /readyz answers "degraded"
// and names the failing one, and signagent_dependency_up says it.
const (
	Store   = metrics.DependencyStore
	Service = metrics.DependencyService
	IdP     = metrics.DependencyIdP
)

// State is what the agent last saw of a dependency: up, or down for a
// reason (one line).
type State struct {
	Up     bool
	Reason string
}

// Dependencies is the state of each shared dependency: the store's from
// the agent's probe, the service's and the identity provider's from the
// calls made to them (a passive check: a dependency not called yet is not
// reported). Every proxied call reports the service, so the state is a
// snapshot read without a lock and replaced only when it changes: the
// calls of a fleet's busiest path do not meet on one mutex. The zero
// value has seen nothing.
type Dependencies struct {
	mu   sync.Mutex // serializes the writers
	seen atomic.Pointer[map[string]State]
}

// snapshot is the state as last written (nil before anything was seen).
func (d *Dependencies) snapshot() map[string]State {
	if p := d.seen.Load(); p != nil {
		return *p
	}
	return nil
}

// Set records dependency name as up (err nil) or down for err's reason
// (its first line).
func (d *Dependencies) Set(name string, err error) {
	s := State{Up: err == nil}
	if err != nil {
		s.Reason, _, _ = strings.Cut(err.Error(), "\n")
	}
	if cur, ok := d.snapshot()[name]; ok && cur == s {
		return // as already seen: nothing to write
	}
	d.change(func(m map[string]State) { m[name] = s })
}

// change replaces the snapshot with a copy that f changed.
func (d *Dependencies) change(f func(map[string]State)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := maps.Clone(d.snapshot())
	if next == nil {
		next = map[string]State{}
	}
	f(next)
	d.seen.Store(&next)
}

// Forget drops what was seen of name (a store no longer configured).
func (d *Dependencies) Forget(name string) {
	d.change(func(m map[string]State) { delete(m, name) })
}

// Get is what was last seen of name, and whether anything was.
func (d *Dependencies) Get(name string) (State, bool) {
	s, ok := d.snapshot()[name]
	return s, ok
}

// Up reports each dependency seen, for the metrics.
func (d *Dependencies) Up() map[string]bool {
	seen := d.snapshot()
	out := make(map[string]bool, len(seen))
	for k, s := range seen {
		out[k] = s.Up
	}
	return out
}

// Saw records a call to dependency name: up when err is nil, down when it
// did not answer or failed (Unanswered); a refusal, or an error before the
// call (the token, the caller's input), says nothing of it.
func (d *Dependencies) Saw(name string, err error) {
	switch {
	case err == nil:
		d.Set(name, nil)
	case Unanswered(err):
		d.Set(name, err)
	}
}

// Unanswered says whether err is a dependency that did not answer, or
// answered with a failure of its own (unreachable, a time-out, a 5xx):
// not the caller's fault nor a refusal.
func Unanswered(err error) bool {
	switch errdefs.Kind(err) {
	case errdefs.ErrUnreachable, errdefs.ErrTimeout, errdefs.ErrFailing:
		return true
	}
	return false
}
