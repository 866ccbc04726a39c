package trusted

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/flight"
	"github.com/signagent/signagent/store"
)

// Share makes the cache keep sessions in s too, for the API key apiKey,
// so that the agents on s make one trusted authentication per credential
// and service user between them; nil s keeps them in memory only.
func (c *Sessions) Share(s store.Records, apiKey string) {
	if s == nil {
		c.shared.Store(nil)
		return
	}
	c.shared.Store(newSharedSessions(s, apiKey))
}

// SessionKey identifies a cached auth.Sid.
type SessionKey struct {
	Kind          canonical.Kind
	Value         string
	ServiceUserID string
}

// String is the key in memory and, digested with the API key's, in the
// shared store (whose names are sealed: no credential appears there).
func (k SessionKey) String() string {
	return k.Kind.String() + "\x00" + k.Value + "\x00" + k.ServiceUserID
}

// CachedSession is an auth.Sid the cache holds, and when it was obtained
// and stops being handed out.
type CachedSession struct {
	Sid        string
	ObtainedAt time.Time
	Expires    time.Time
}

// Sessions keeps auth.sids in memory for a lifetime well under the
// service's, and makes concurrent requests for the same key share one flow.
type Sessions struct {
	ttl   time.Duration
	now   func() time.Time
	group flight.Group[CachedSession]
	// shared, when set, is the store the agents on it share sessions in.
	shared atomic.Pointer[sharedSessions]

	mu      sync.Mutex
	entries map[SessionKey]CachedSession
	sweepAt int // sweep expired entries when the map grows past this
}

const minSweep = 1024

// NewSessions is an empty cache of sessions, each kept for ttl.
func NewSessions(ttl time.Duration) *Sessions {
	return &Sessions{ttl: ttl, now: time.Now, entries: map[SessionKey]CachedSession{}, sweepAt: minSweep}
}

// get returns a cached, unexpired session.
func (c *Sessions) get(k SessionKey) (CachedSession, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.entries[k]
	if ok && !c.now().Before(s.Expires) {
		delete(c.entries, k)
		ok = false
	}
	return s, ok
}

// drop forgets a cached session, in the shared store too, and reports
// whether this agent had one.
func (c *Sessions) Drop(k SessionKey) bool {
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

// SetTTL changes how long sessions obtained from now on are kept (a
// reload).
func (c *Sessions) SetTTL(ttl time.Duration) {
	c.mu.Lock()
	c.ttl = ttl
	c.mu.Unlock()
}

// Obtain returns the cached session for k or runs flow once for all the
// callers asking at the same time, and where the session came from
// (FromMemory for every caller that did not cause a login). The flow runs detached from any one caller's cancellation,
// bounded by timeout, so that one caller giving up does not fail the others.
//
// refresh asks for a new session, but one obtained less than floor ago is
// handed out instead: it is as fresh as another flow would give, and a
// caller repeating refresh must not make the token sign on every request.
func (c *Sessions) Obtain(ctx context.Context, k SessionKey, refresh bool, floor, timeout time.Duration,
	flow func(context.Context) (*Session, error)) (CachedSession, string, error) {
	if refresh {
		c.dropOlder(k, floor)
	}
	if s, ok := c.get(k); ok {
		return s, FromMemory, nil
	}
	return c.group.Do(ctx, k.String(), func() (CachedSession, string, error) {
		if s, ok := c.get(k); ok { // filled while we queued for the group
			return s, FromMemory, nil
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
				source := FromLogin
				if fromStore {
					source = FromStore
				}
				return s, source, nil
			case !errors.Is(err, store.ErrUnavailable):
				return CachedSession{}, "", err
			}
			// The store does not answer: log in here.
		}
		sess, err := flow(fctx)
		if err != nil {
			return CachedSession{}, "", err
		}
		s := CachedSession{Sid: sess.Sid, ObtainedAt: sess.ObtainedAt, Expires: sess.ObtainedAt.Add(ttl)}
		c.keep(k, s)
		return s, FromLogin, nil
	})
}

// Where a session came from: this agent's memory, the shared store
// (another agent logged in), or a login just now.
const (
	FromMemory = flight.FromMemory
	FromStore  = "store"
	FromLogin  = "login"
)

// keep puts s in memory for k.
func (c *Sessions) keep(k SessionKey, s CachedSession) {
	c.mu.Lock()
	c.entries[k] = s
	c.sweepLocked()
	c.mu.Unlock()
}

// dropOlder forgets k's session when it was obtained at least age ago.
func (c *Sessions) dropOlder(k SessionKey, age time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.entries[k]; ok && c.now().Sub(s.ObtainedAt) >= age {
		delete(c.entries, k)
	}
}

// sweepLocked drops expired sessions once the map has doubled since the last
// sweep, so that sessions of users who never come back do not stay in
// memory; the cost is amortized over the insertions.
func (c *Sessions) sweepLocked() {
	if len(c.entries) < c.sweepAt {
		return
	}
	now := c.now()
	for k, s := range c.entries {
		if !now.Before(s.Expires) {
			delete(c.entries, k)
		}
	}
	c.sweepAt = max(minSweep, 2*len(c.entries))
}

// sessionKind is the trusted sessions' kind in the shared store.
const sessionKind = "trusted"

// sharedSessions keeps trusted sessions in a shared store, so that the
// agents on it make one trusted authentication (one signature) per API
// key, credential and service user, not one each.
type sharedSessions struct {
	s       store.Records
	partner string // a digest of the API key: sessions of another key never mix
}

type storedSession struct {
	Sid        string    `json:"sid"`
	ObtainedAt time.Time `json:"obtainedAt"`
}

func newSharedSessions(s store.Records, apiKey string) *sharedSessions {
	sum := sha256.Sum256([]byte("signagent partner\x00" + apiKey))
	return &sharedSessions{s: s, partner: hex.EncodeToString(sum[:8])}
}

// obtain returns k's session from the store, or runs flow under k's lease
// when the store has none usable (another agent holding the lease is
// waited for, and its session used), and keeps the result for ttl. An
// error wrapping store.ErrUnavailable means the store could not be used
// (the caller logs in locally); any other is flow's.
func (sh *sharedSessions) obtain(ctx context.Context, k SessionKey, refresh bool, floor, ttl time.Duration, now func() time.Time,
	flow func(context.Context) (*Session, error)) (CachedSession, bool, error) {
	decode := func(b []byte) (CachedSession, bool) {
		var st storedSession
		if json.Unmarshal(b, &st) != nil || st.Sid == "" {
			return CachedSession{}, false
		}
		s := CachedSession{Sid: st.Sid, ObtainedAt: st.ObtainedAt, Expires: st.ObtainedAt.Add(ttl)}
		// Expired, or older than the floor when the caller asks for a
		// new one: not to be used.
		ok := now().Before(s.Expires) && (!refresh || now().Sub(s.ObtainedAt) < floor)
		return s, ok
	}
	b, fromStore, err := store.Obtain(ctx, sh.s, sessionKind, sh.partner+"\x00"+k.String(),
		func(b []byte) bool { _, ok := decode(b); return ok },
		func(ctx context.Context) ([]byte, time.Duration, error) {
			sess, err := flow(ctx)
			if err != nil {
				return nil, 0, err
			}
			b, err := json.Marshal(storedSession{Sid: sess.Sid, ObtainedAt: sess.ObtainedAt})
			return b, ttl, err
		})
	if err != nil {
		return CachedSession{}, false, err
	}
	s, _ := decode(b)
	return s, fromStore, nil
}

// drop removes k's session from the store (best effort).
func (sh *sharedSessions) drop(ctx context.Context, k SessionKey) {
	id := sh.partner + "\x00" + k.String()
	l, err := sh.s.Acquire(ctx, sessionKind, id)
	if err != nil {
		return
	}
	defer l.Release()
	sh.s.Delete(ctx, sessionKind, id, l)
}

// SharedSession is the trusted session the agents on s share for apiKey,
// cred and serviceUserID (what `signagent trusted session --store` uses, so that
// the command line and the agents log in once between them): the store's
// when it has one younger than ttl, else flow's, run under the identity's
// lease and kept for ttl. fromStore reports that flow did not run.
func SharedSession(ctx context.Context, s store.Records, apiKey string, cred canonical.Credential, serviceUserID string, ttl time.Duration,
	flow func(context.Context) (*Session, error)) (sid string, obtainedAt time.Time, fromStore bool, err error) {
	c, fromStore, err := newSharedSessions(s, apiKey).obtain(ctx, SessionKey{Kind: cred.Kind, Value: cred.Value, ServiceUserID: serviceUserID}, false, 0, ttl, time.Now, flow)
	return c.Sid, c.ObtainedAt, fromStore, err
}
