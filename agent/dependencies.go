package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/signagent/signagent/agent/health"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

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
		a.deps.Forget(health.Store)
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
	a.deps.Set(health.Store, err)
}

// probeKind is the kind of the probe's lease in the store: no record of
// that kind is ever written.
const probeKind = "probe"

// sawHeader records what obtaining an Authorization header of scheme
// said of a dependency: a refresh at the identity provider (OpenID
// Connect), a login at the service (the others); from memory or the
// store, nothing was called.
func (a *Agent) sawHeader(scheme, source string, err error) {
	dep := health.Service
	if scheme == authz.SchemeOIDC {
		dep = health.IdP
	}
	switch {
	case err != nil:
		a.deps.Saw(dep, err)
	case source == oidc.FromRefresh, source == trusted.FromLogin:
		a.deps.Saw(dep, nil)
	}
}

// login is a trusted authentication at the service, recorded.
func (a *Agent) login(ctx context.Context, c *trusted.Client, cred canonical.Credential, userID string) (*trusted.Session, error) {
	s, err := c.Session(ctx, cred, userID)
	a.deps.Saw(health.Service, err)
	return s, err
}
