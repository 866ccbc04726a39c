package agent

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/signagent/signagent/canonical"
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

// drop forgets a cached session and reports whether there was one.
func (c *sessionCache) drop(k sessionKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[k]
	delete(c.entries, k)
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
	flow func(context.Context) (*trusted.Session, error)) (cachedSession, bool, error) {
	if refresh {
		c.dropOlder(k, floor)
	}
	if s, ok := c.get(k); ok {
		return s, true, nil
	}
	ch := c.group.DoChan(k.String(), func() (any, error) {
		if s, ok := c.get(k); ok { // filled while we queued for the group
			return s, nil
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		sess, err := flow(fctx)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		s := cachedSession{sid: sess.Sid, obtainedAt: sess.ObtainedAt, expires: sess.ObtainedAt.Add(c.ttl)}
		c.entries[k] = s
		c.sweepLocked()
		c.mu.Unlock()
		return s, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return cachedSession{}, false, r.Err
		}
		return r.Val.(cachedSession), false, nil
	case <-ctx.Done():
		return cachedSession{}, false, ctx.Err()
	}
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
