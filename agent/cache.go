package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

// sessionKey identifies a cached auth.sid.
type sessionKey struct {
	kind          canonical.Kind
	value         string
	serviceUserID string
}

func (k sessionKey) String() string {
	return k.kind.String() + "\x00" + k.value + "\x00" + k.serviceUserID
}

type cachedSession struct {
	sid        string
	obtainedAt time.Time
	expires    time.Time
}

// sessionCache keeps auth.sids in memory for a lifetime well under the
// service's, and makes concurrent requests for the same key share one flow.
type sessionCache struct {
	ttl   time.Duration
	now   func() time.Time
	group singleflight.Group
	// shared, when set, is the store the agents on it share sessions in;
	// fallbacks counts the logins made locally because it did not answer.
	shared    atomic.Pointer[sharedSessions]
	fallbacks atomic.Int64

	mu      sync.Mutex
	entries map[sessionKey]cachedSession
	sweepAt int // sweep expired entries when the map grows past this
}

const minSweep = 1024

func newSessionCache(ttl time.Duration) *sessionCache {
	return &sessionCache{ttl: ttl, now: time.Now, entries: map[sessionKey]cachedSession{}, sweepAt: minSweep}
}

// get returns a cached, unexpired session.
func (c *sessionCache) get(k sessionKey) (cachedSession, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.entries[k]
	if ok && !c.now().Before(s.expires) {
		delete(c.entries, k)
		ok = false
	}
	return s, ok
}

// drop forgets a cached session, in the shared store too, and reports
// whether this agent had one.
func (c *sessionCache) drop(k sessionKey) bool {
	c.mu.Lock()
	_, ok := c.entries[k]
	delete(c.entries, k)
	c.mu.Unlock()
	if sh := c.shared.Load(); sh != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*store.DefaultTimeout)
		defer cancel()
		sh.drop(ctx, k)
	}
	return ok
}

func (c *sessionCache) setTTL(ttl time.Duration) {
	c.mu.Lock()
	c.ttl = ttl
	c.mu.Unlock()
}

// obtain returns the cached session for k or runs flow once for all the
// callers asking at the same time. cached reports whether no flow ran for
// this caller. The flow runs detached from any one caller's cancellation,
// bounded by timeout, so that one caller giving up does not fail the others.
//
// refresh asks for a new session, but one obtained less than floor ago is
// handed out instead: it is as fresh as another flow would give, and a
// caller repeating refresh must not make the token sign on every request.
func (c *sessionCache) obtain(ctx context.Context, k sessionKey, refresh bool, floor, timeout time.Duration,
	flow func(context.Context) (*trusted.Session, error)) (cachedSession, string, error) {
	if refresh {
		c.dropOlder(k, floor)
	}
	if s, ok := c.get(k); ok {
		return s, fromMemory, nil
	}
	ch := c.group.DoChan(k.String(), func() (any, error) {
		if s, ok := c.get(k); ok { // filled while we queued for the group
			return obtained{s, fromMemory, new(atomic.Bool)}, nil
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		c.mu.Lock()
		ttl := c.ttl
		c.mu.Unlock()
		if sh := c.shared.Load(); sh != nil {
			s, fromStore, err := sh.obtain(fctx, k, refresh, floor, ttl, c.now, flow)
			switch {
			case err == nil:
				c.keep(k, s)
				source := fromLogin
				if fromStore {
					source = fromSharedStore
				}
				return obtained{s, source, new(atomic.Bool)}, nil
			case !errors.Is(err, store.ErrUnavailable):
				return nil, err
			}
			c.fallbacks.Add(1) // the store does not answer: log in here
		}
		sess, err := flow(fctx)
		if err != nil {
			return nil, err
		}
		s := cachedSession{sid: sess.Sid, obtainedAt: sess.ObtainedAt, expires: sess.ObtainedAt.Add(ttl)}
		c.keep(k, s)
		return obtained{s, fromLogin, new(atomic.Bool)}, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return cachedSession{}, "", r.Err
		}
		s, source := r.Val.(obtained).take()
		return s, source, nil
	case <-ctx.Done():
		return cachedSession{}, "", ctx.Err()
	}
}

// Where a session came from: this agent's memory, the shared store
// (another agent logged in), or a login just now.
const (
	fromMemory      = "memory"
	fromSharedStore = "store"
	fromLogin       = "login"
)

// obtained is a session and where it came from; the flight's first taker
// claims the source, the others who waited on it got a session that was
// there for them (memory), so that a login is counted once.
type obtained struct {
	s       cachedSession
	source  string
	claimed *atomic.Bool
}

func (o obtained) take() (cachedSession, string) {
	if o.source != fromMemory && !o.claimed.CompareAndSwap(false, true) {
		return o.s, fromMemory
	}
	return o.s, o.source
}

// keep puts s in memory for k.
func (c *sessionCache) keep(k sessionKey, s cachedSession) {
	c.mu.Lock()
	c.entries[k] = s
	c.sweepLocked()
	c.mu.Unlock()
}

// dropOlder forgets k's session when it was obtained at least age ago.
func (c *sessionCache) dropOlder(k sessionKey, age time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.entries[k]; ok && c.now().Sub(s.obtainedAt) >= age {
		delete(c.entries, k)
	}
}

// sweepLocked drops expired sessions once the map has doubled since the last
// sweep, so that sessions of users who never come back do not stay in
// memory; the cost is amortized over the insertions.
func (c *sessionCache) sweepLocked() {
	if len(c.entries) < c.sweepAt {
		return
	}
	now := c.now()
	for k, s := range c.entries {
		if !now.Before(s.expires) {
			delete(c.entries, k)
		}
	}
	c.sweepAt = max(minSweep, 2*len(c.entries))
}
