package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

// sessionKind is the trusted sessions' kind in the shared store.
const sessionKind = "trusted"

// sharedSessions keeps trusted sessions in a shared store, so that the
// agents on it make one trusted authentication (one signature) per API
// key, credential and service user, not one each.
type sharedSessions struct {
	s       *store.Redis
	partner string // a digest of the API key: sessions of another key never mix
}

type storedSession struct {
	Sid        string    `json:"sid"`
	ObtainedAt time.Time `json:"obtainedAt"`
}

func newSharedSessions(s *store.Redis, apiKey string) *sharedSessions {
	sum := sha256.Sum256([]byte("signagent partner\x00" + apiKey))
	return &sharedSessions{s: s, partner: hex.EncodeToString(sum[:8])}
}

// obtain returns k's session from the store, or runs flow under k's lease
// when the store has none usable (another agent holding the lease is
// waited for, and its session used), and keeps the result for ttl. An
// error wrapping store.ErrUnavailable means the store could not be used
// (the caller logs in locally); any other is flow's.
func (sh *sharedSessions) obtain(ctx context.Context, k sessionKey, refresh bool, floor, ttl time.Duration, now func() time.Time,
	flow func(context.Context) (*trusted.Session, error)) (cachedSession, bool, error) {
	decode := func(b []byte) (cachedSession, bool) {
		var st storedSession
		if json.Unmarshal(b, &st) != nil || st.Sid == "" {
			return cachedSession{}, false
		}
		s := cachedSession{sid: st.Sid, obtainedAt: st.ObtainedAt, expires: st.ObtainedAt.Add(ttl)}
		// Expired, or older than the floor when the caller asks for a
		// new one: not to be used.
		ok := now().Before(s.expires) && (!refresh || now().Sub(s.obtainedAt) < floor)
		return s, ok
	}
	b, fromStore, err := sh.s.Obtain(ctx, sessionKind, sh.partner+"\x00"+k.String(),
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
		return cachedSession{}, false, err
	}
	s, _ := decode(b)
	return s, fromStore, nil
}

// drop removes k's session from the store (best effort).
func (sh *sharedSessions) drop(ctx context.Context, k sessionKey) {
	id := sh.partner + "\x00" + k.String()
	l, err := sh.s.Acquire(ctx, sessionKind, id)
	if err != nil {
		return
	}
	defer l.Release()
	sh.s.Delete(ctx, sessionKind, id, l)
}

// SharedSession is the trusted session the agents on s share for apiKey,
// cred and serviceUserID (what `signagent session --store` uses, so that
// the command line and the agents log in once between them): the store's
// when it has one younger than ttl, else flow's, run under the identity's
// lease and kept for ttl. fromStore reports that flow did not run.
func SharedSession(ctx context.Context, s *store.Redis, apiKey string, cred canonical.Credential, serviceUserID string, ttl time.Duration,
	flow func(context.Context) (*trusted.Session, error)) (sid string, obtainedAt time.Time, fromStore bool, err error) {
	c, fromStore, err := newSharedSessions(s, apiKey).obtain(ctx, sessionKey{cred.Kind, cred.Value, serviceUserID}, false, 0, ttl, time.Now, flow)
	return c.sid, c.obtainedAt, fromStore, err
}
