package agent

import (
	"cmp"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/internal/secret"
)

// held are the identities the agent obtained a header for, as
// `signagent agent identities` lists them (ssh-add -l): the scheme, the
// identity without a secret, the header masked, its expiry and use. The
// headers themselves stay in the schemes' caches; this is their index,
// bounded, in memory, dropped entry by entry when a header expires or the
// service refused it.
type held struct {
	mu sync.Mutex
	m  map[heldKey]*heldEntry
}

// heldEntry is an identity and its current header, masked only when
// listed (a mask per request would cost every call).
type heldEntry struct {
	agentapi.Identity
	value string
}

type heldKey struct{ scheme, identity string }

// maxHeld bounds the index; past it the least recently used entry goes.
const maxHeld = 10000

// note records a header obtained (or served from the cache) for identity.
func (h *held) note(scheme, identity string, hdr authz.Header, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[heldKey]*heldEntry{}
	}
	k := heldKey{scheme, identity}
	e := h.m[k]
	if e == nil {
		if len(h.m) >= maxHeld {
			h.evict(now)
		}
		e = &heldEntry{Identity: agentapi.Identity{Scheme: scheme, Identity: identity}}
		h.m[k] = e
	}
	e.value, e.ExpiresAt, e.LastUsed = hdr.Value, agentapi.At(hdr.ExpiresAt), agentapi.At(now)
	if hdr.Subject != "" {
		e.Subject = hdr.Subject
	}
	e.Uses++
}

// forget drops identity's entry: the service refused its header, or a
// caller asked for a fresh one (until it is obtained again).
func (h *held) forget(scheme, identity string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, heldKey{scheme, identity})
}

// evict drops the expired entries, and the least recently used one if
// none was.
func (h *held) evict(now time.Time) {
	var oldest *heldKey
	for k, e := range h.m {
		if !e.ExpiresAt.IsZero() && !e.ExpiresAt.After(now) {
			delete(h.m, k)
			continue
		}
		if oldest == nil || e.LastUsed.Before(h.m[*oldest].LastUsed.Time) {
			k := k
			oldest = &k
		}
	}
	if len(h.m) >= maxHeld && oldest != nil {
		delete(h.m, *oldest)
	}
}

// list is the index now, without the expired entries, by scheme and
// identity.
func (h *held) list(now time.Time) []agentapi.Identity {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []agentapi.Identity{}
	for k, e := range h.m {
		if !e.ExpiresAt.IsZero() && !e.ExpiresAt.After(now) {
			delete(h.m, k)
			continue
		}
		id := e.Identity
		id.Header = secret.Mask(e.value)
		out = append(out, id)
	}
	slices.SortFunc(out, func(a, b agentapi.Identity) int {
		return cmp.Or(cmp.Compare(a.Scheme, b.Scheme), cmp.Compare(a.Identity, b.Identity))
	})
	return out
}

// identities serves GET /v1/identities.
func (a *Agent) identities(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, agentapi.IdentitiesResponse{Identities: a.held.list(time.Now())})
}
