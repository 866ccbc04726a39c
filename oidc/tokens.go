package oidc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/signagent/signagent/authz"
)

// Tokens hands out a profile's access token from the store, refreshing it
// when it has less than Before left: one refresh at a time per profile,
// in this process (single-flight) and across processes (the store's lock),
// and a record another process refreshed meanwhile is used as it is.
type Tokens struct {
	// Store keeps the records: the local files (Store) or a shared store
	// (Shared).
	Store Records
	// Client returns the client that refreshes rec (its provider and
	// client_id, with the configured secret).
	Client func(rec *Record) (*Client, error)
	// Before is how much life an access token must have left to be used
	// (default 60s).
	Before time.Duration
	// Timeout bounds one refresh, waiting for another process's included
	// (default 60s).
	Timeout time.Duration
	Now     func() time.Time
	// OnRefresh, when set, is told each refresh's outcome: "ok",
	// "refused" (sign in again) or "error".
	OnRefresh func(profile, result string)
	// RefreshLifetime is how long a refresh token lasts (default
	// DefaultRefreshLifetime): RefreshExpiries adds it to a token's issue.
	RefreshLifetime time.Duration

	sf       singleflight.Group
	mu       sync.Mutex
	cache    map[string]cached
	rejected map[string]string // profile -> an access token the service refused
	// unsaved are refreshed records the store has not taken yet (unsaved.go).
	unsaved map[string]unsaved
	held    map[string]heldRefresh
	// The writer of the unsaved records (one at a most): running, and
	// how it is stopped and waited for; flushMu orders the writes.
	writing          bool
	stop, writerDone chan struct{}
	flushMu          sync.Mutex
	// closed: replaced by next (a reload: TakeOver), or Close.
	closed bool
	next   *Tokens
	// down is when the store last said it is unavailable, and what: for
	// storeDownFor, calls answer from memory without asking it again.
	down    time.Time
	downErr error
}

// storeDownFor is how long a store found unavailable is not asked again:
// about the agent's probe interval; meanwhile a profile due for a refresh
// is served from memory (or refused) at once, not after two timeouts.
const storeDownFor = time.Second

// noteDown remembers err, the store's unavailability, for storeDownFor.
func (t *Tokens) noteDown(err error) {
	if !errors.Is(err, ErrStoreUnavailable) {
		return
	}
	t.mu.Lock()
	t.down, t.downErr = time.Now(), err
	t.mu.Unlock()
}

// storeDown is the store's unavailability noted within storeDownFor, nil
// when there is none.
func (t *Tokens) storeDown() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.downErr != nil && time.Since(t.down) < storeDownFor {
		return t.downErr
	}
	return nil
}

// storeUp forgets the store's unavailability: it answered.
func (t *Tokens) storeUp() {
	t.mu.Lock()
	t.downErr = nil
	t.mu.Unlock()
}

// cached is a record read from the store and the file it came from: the
// agent answers from memory while the file is unchanged.
type cached struct {
	rec  *Record
	stat fileID
	// checked is when the file was last seen unchanged: within
	// restatAfter, a fresh record is served without a stat.
	checked time.Time
}

// restatAfter is how long a record read from a file is served from memory
// without looking at the file again: another process's sign-in or logout
// is seen within it; a refresh always reads the file again, under its
// lock, so a refresh token is never used twice.
const restatAfter = time.Second

type fileID struct {
	ino, size int64
	mtime     time.Time
}

func statID(path string) (fileID, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return fileID{}, false
	}
	id := fileID{size: st.Size(), mtime: st.ModTime()}
	if s, ok := st.Sys().(interface{ Ino() uint64 }); ok {
		id.ino = int64(s.Ino())
	}
	return id, true
}

func (t *Tokens) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// fresh says whether r's access token is used without a refresh.
func (t *Tokens) fresh(r *Record) bool { return t.goodFor(r, t.margin(r)) }

// usable says whether r's access token, due for a refresh that cannot run
// (the store is down), may still be served: not refused by the service,
// and with at least half of its margin left, so that it does not expire
// on its way to the service.
func (t *Tokens) usable(r *Record) bool { return t.goodFor(r, t.margin(r)/2) }

// goodFor says whether r's access token was not refused by the service
// and has more than left of its life left.
func (t *Tokens) goodFor(r *Record, left time.Duration) bool {
	t.mu.Lock()
	bad := t.rejected[r.Profile] == r.AccessToken
	t.mu.Unlock()
	return !bad && t.now().Add(left).Before(r.Expiry)
}

// RefreshFraction: an access token is refreshed with 1/RefreshFraction
// of its lifetime left, if that is less than Before: a token that lives
// 8 s is refreshed with 1 s left, not on every call (a fixed 60 s margin
// made every use of a short-lived token a refresh grant), and refreshes
// come at most 8/7 as often as the token's lifetime.
const RefreshFraction = 8

// margin is how much life r's access token must have left to be used:
// Before, or an eighth of the token's lifetime when that is less.
func (t *Tokens) margin(r *Record) time.Duration {
	before := t.Before
	if before <= 0 {
		before = DefaultRefreshBefore
	}
	if life := r.Expiry.Sub(r.ObtainedAt()); life > 0 {
		before = min(before, life/RefreshFraction)
	}
	return before
}

// Token returns profile's record with an access token good for at least
// Before, refreshing it when needed. A profile that must sign in again
// wraps ErrSignIn.
func (t *Tokens) Token(ctx context.Context, profile string) (*Record, bool, error) {
	rec, from, err := t.TokenFrom(ctx, profile)
	return rec, from != FromRefresh, err
}

// Where an access token came from: this process's memory, the store (a
// file or the shared store: another process's sign-in or refresh), or a
// refresh just now.
const (
	FromMemory  = "memory"
	FromStore   = "store"
	FromRefresh = "refresh"
)

// TokenFrom is Token saying where the record came from: FromMemory,
// FromStore or FromRefresh.
func (t *Tokens) TokenFrom(ctx context.Context, profile string) (*Record, string, error) {
	if next := t.successor(); next != nil {
		return next.TokenFrom(ctx, profile) // replaced by a reload
	}
	rec, from, err := t.loadFrom(profile)
	if err != nil {
		return nil, "", err
	}
	if t.fresh(rec) {
		return rec, from, nil
	}
	if err := t.storeDown(); err != nil {
		// Found down a moment ago: no lease to be had.
		if t.usable(rec) {
			return rec, FromMemory, nil
		}
		return nil, "", err
	}
	ch := t.sf.DoChan(profile, func() (any, error) {
		timeout := t.Timeout
		if timeout <= 0 {
			timeout = 60 * time.Second
		}
		// Detached from the first caller: its giving up must not cancel
		// the refresh the others wait for.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		rec, refreshed, err := t.refresh(rctx, profile)
		if err != nil {
			return nil, err
		}
		if refreshed {
			return sourced{rec, FromRefresh, new(atomic.Bool)}, nil
		}
		return sourced{rec, FromStore, new(atomic.Bool)}, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			if errors.Is(r.Err, ErrStoreUnavailable) && t.usable(rec) {
				// No refresh without the store's lease; the token in
				// hand still has time left: served meanwhile.
				return rec, FromMemory, nil
			}
			return nil, "", r.Err
		}
		rec, from := r.Val.(sourced).take()
		return rec, from, nil
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
}

// sourced is a record and where it came from; the flight's first taker
// claims the source, the others who waited on it got a record that was
// there for them (FromMemory), so that a refresh is counted once.
type sourced struct {
	rec     *Record
	from    string
	claimed *atomic.Bool
}

func (s sourced) take() (*Record, string) {
	if !s.claimed.CompareAndSwap(false, true) {
		return s.rec, FromMemory
	}
	return s.rec, s.from
}

// load reads the record (see loadFrom).
func (t *Tokens) load(profile string) (*Record, error) {
	rec, _, err := t.loadFrom(profile)
	return rec, err
}

// loadFrom reads the record, from memory while the file is unchanged (or,
// for a shared store, while it needs no refresh), and says which.
func (t *Tokens) loadFrom(profile string) (*Record, string, error) {
	if err := CheckProfile(profile); err != nil {
		return nil, "", err
	}
	if u, ok := t.unsavedOf(profile); ok {
		// A refreshed record the store has not taken: the store's copy
		// holds a spent refresh token.
		return u.rec, FromMemory, nil
	}
	t.mu.Lock()
	c, hit := t.cache[profile]
	t.mu.Unlock()
	var id fileID
	if fs, local := t.Store.(Files); local {
		// The file is read again only when it changed (another process
		// refreshed or signed in): a stat at most every restatAfter.
		if hit && time.Since(c.checked) < restatAfter && t.fresh(c.rec) {
			return c.rec, FromMemory, nil
		}
		var ok bool
		if id, ok = statID(fs.Path(profile)); ok && hit && c.stat == id {
			t.mu.Lock()
			if cur, still := t.cache[profile]; still && cur.rec == c.rec {
				cur.checked = time.Now()
				t.cache[profile] = cur
			}
			t.mu.Unlock()
			return c.rec, FromMemory, nil
		}
	} else if hit && t.fresh(c.rec) {
		// A shared store is read only when the copy in memory needs a
		// refresh: a cached header costs no round trip.
		return c.rec, FromMemory, nil
	}
	if down := t.storeDown(); down != nil {
		// Found down a moment ago: not asked again yet.
		if hit {
			return c.rec, FromMemory, nil
		}
		return nil, "", fmt.Errorf("%w; the access token needs a refresh, which waits for the store", down)
	}
	rec, err := t.Store.Load(profile)
	t.noteDown(err)
	if err != nil {
		if errors.Is(err, ErrStoreUnavailable) && hit && t.now().Before(c.rec.Expiry) {
			return c.rec, FromMemory, nil // still valid: served while the store is down
		}
		t.forget(profile)
		if errors.Is(err, ErrSignIn) {
			t.noteSignOut(profile) // signed out (its record removed)
		}
		if errors.Is(err, ErrStoreUnavailable) {
			// No refresh without the store: a refresh token used by two
			// agents would sign the user out everywhere.
			err = fmt.Errorf("%w; the access token needs a refresh, which waits for the store", err)
		}
		return nil, "", err
	}
	t.storeUp()
	t.remember(profile, rec, id)
	return rec, FromStore, nil
}

// Reject marks value, profile's access token that the service answered
// 401 to, as unusable: the next Token refreshes (unless another process
// already has).
func (t *Tokens) Reject(profile, value string) {
	if next := t.successor(); next != nil {
		next.Reject(profile, value)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rejected == nil {
		t.rejected = map[string]string{}
	}
	t.rejected[profile] = value
}

// Expire rejects the profile's current access token, whatever it is.
func (t *Tokens) Expire(profile string) { t.ExpireOlder(profile, 0) }

// ExpireOlder rejects the profile's current access token when it was
// obtained (signed in or refreshed) at least age ago: a caller asking for
// a fresh one gets a token refreshed a moment ago instead of another
// refresh grant.
func (t *Tokens) ExpireOlder(profile string, age time.Duration) {
	if next := t.successor(); next != nil {
		next.ExpireOlder(profile, age)
		return
	}
	rec, err := t.load(profile)
	if err != nil {
		return
	}
	if t.now().Sub(rec.ObtainedAt()) >= age {
		t.Reject(profile, rec.AccessToken)
	}
}

func (t *Tokens) remember(profile string, rec *Record, id fileID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cache == nil {
		t.cache = map[string]cached{}
	}
	t.cache[profile] = cached{rec: rec, stat: id, checked: time.Now()}
	t.noteRefresh(profile, rec)
}

func (t *Tokens) forget(profile string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.cache, profile)
}

func (t *Tokens) refresh(ctx context.Context, profile string) (*Record, bool, error) {
	if next := t.successor(); next != nil {
		return next.refresh(ctx, profile) // replaced by a reload: its records
	}
	// This process refreshed last, and the store did not take it: written
	// first, over the record it replaced (or dropped, when moot).
	if err := t.flush(ctx, profile); err != nil {
		return nil, false, err
	}
	// A lease not had is not noted as the store down: another agent may
	// hold it.
	unlock, err := t.Store.Lock(ctx, profile)
	if err != nil {
		return nil, false, err
	}
	if next := t.successor(); next != nil {
		// Replaced while waiting: the records (an unsaved one) are its.
		unlock()
		return next.refresh(ctx, profile)
	}
	held := false // by the unsaved record, until it is written
	defer func() {
		if !held {
			unlock()
		}
	}()
	// Another process may have refreshed while we waited for the lock.
	rec, err := t.Store.Load(profile)
	if err != nil {
		t.noteDown(err)
		return nil, false, err
	}
	if t.fresh(rec) {
		t.forget(profile)
		return rec, false, nil
	}
	c, err := t.Client(rec)
	if err != nil {
		return nil, false, err
	}
	nrec, err := c.Refresh(ctx, rec)
	if errors.Is(err, ErrSignIn) {
		// Refused: if another process or agent refreshed meanwhile (its
		// one-time refresh token replaced ours), use its record.
		if again, lerr := t.Store.Load(profile); lerr == nil && again.RefreshToken != rec.RefreshToken && t.fresh(again) {
			t.forget(profile)
			return again, false, nil
		}
	}
	if err != nil {
		result := "error"
		if errors.Is(err, ErrSignIn) {
			result = "refused"
			t.noteSignOut(profile)
			err = fmt.Errorf("%w; sign in again: signagent oidc login --profile %s", err, profile)
		}
		t.report(profile, result)
		return nil, false, err
	}
	t.report(profile, "ok")
	if err := t.Store.Save(nrec); err != nil {
		// The provider spent rec's refresh token: nrec is the only record
		// with a live one. Served from here, written when the store takes
		// it; never refreshed from the store's spent copy.
		// The lease stays held (and renewed) until it is written, so that
		// no other agent refreshes from the store's copy meanwhile.
		held = true
		t.keepUnsaved(profile, unsaved{rec: nrec, replaces: rec.RefreshToken, unlock: unlock})
		t.noteDown(err)
		t.forget(profile)
		return nrec, true, nil
	}
	t.forget(profile)
	t.mu.Lock()
	t.noteRefresh(profile, nrec)
	t.mu.Unlock()
	return nrec, true, nil
}

func (t *Tokens) report(profile, result string) {
	if t.OnRefresh != nil {
		t.OnRefresh(profile, result)
	}
}

// For is profile's authz.Authorizer: the Bearer header of its access
// token; a value the service refused makes the next one a refresh.
func (t *Tokens) For(profile string) authz.Authorizer { return authorizer{t, profile} }

type authorizer struct {
	t       *Tokens
	profile string
}

func (a authorizer) Header(ctx context.Context) (authz.Header, error) {
	rec, from, err := a.t.TokenFrom(ctx, a.profile)
	if err != nil {
		return authz.Header{}, err
	}
	return authz.Header{Value: rec.Header(), ExpiresAt: rec.Expiry, Cached: from != FromRefresh, Source: from, Subject: rec.Subject}, nil
}

func (a authorizer) Reject(value string) {
	a.t.Reject(a.profile, strings.TrimPrefix(value, "Bearer "))
}

func (a authorizer) Forget(age time.Duration) { a.t.ExpireOlder(a.profile, age) }
func (a authorizer) Identity() string         { return "profile " + a.profile }
func (a authorizer) String() string           { return "the OpenID Connect access token of profile " + a.profile }
