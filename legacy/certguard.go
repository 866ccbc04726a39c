package legacy

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/store"
)

// A certificate login has the token open whatever the business API sends
// as its challenge. Whoever answers there (a hostile or impersonated API)
// could send, as "challenges", windows of a document encrypted to the
// user's certificate and read it back from AuthenticateConfirm: GOST
// 28147-89 CFB has no integrity, and the document's own key transport is
// genuine, so the token's MAC check passes. Three rules keep the token to
// the service's challenges:
//   - only a random of exactly the challenge's length is opened
//     (envelope.Read): at most that much of a document, not all of it;
//   - a key transport is opened once (Guard.first): the same document's
//     key transport, sent again with another window, is refused without
//     asking the token, by this process and, through the shared store, by
//     every agent on it;
//   - after a login that failed once a challenge came, the next login for
//     that certificate waits, 1 s doubling to 5 min (Guard.floor), so that
//     no caller can drive logins in a loop.

// Defaults of a Guard.
const (
	// DefaultTransportTTL is how long an opened key transport is
	// remembered: far longer than a challenge lives (about 10 minutes).
	DefaultTransportTTL = 7 * 24 * time.Hour
	// FloorStart and FloorMax bound the wait after a failed certificate
	// login: it starts at FloorStart and doubles with each failure in a
	// row, up to FloorMax; a login that succeeds ends it.
	FloorStart = time.Second
	FloorMax   = 5 * time.Minute
	// maxSeen bounds the key transports remembered in memory: past it,
	// the expired ones go, then the oldest.
	maxSeen = 1 << 16
)

// transportKind is the kind of a key transport's mark in a shared store.
const transportKind = "certlogin-transport"

// The outcomes of a certificate login (CertLogin.Outcome), for the audit
// log and the metrics.
const (
	CertOK           = "ok"                // the service answered a token
	CertBackoff      = "backoff"           // not tried: a failure's wait is not over
	CertNotChallenge = "not_challenge"     // the answer is not a challenge this certificate opens
	CertReplayed     = "replayed"          // its key transport was opened before: refused, the token not asked
	CertUnverified   = "store_unavailable" // the shared store could not say it was new: refused, the token not asked
	CertNotOpened    = "not_opened"        // the token did not open it to a random of the challenge's length
	CertRefused      = "refused"           // AuthenticateConfirm was refused
	CertError        = "error"             // the service did not answer (no challenge, or no confirmation)
)

// CertOutcomes are all the outcomes, for metrics that start at zero.
var CertOutcomes = []string{CertOK, CertBackoff, CertNotChallenge, CertReplayed, CertUnverified, CertNotOpened, CertRefused, CertError}

// CertLogin is one certificate login as the audit log records it: no
// secret, the challenge's random least of all.
type CertLogin struct {
	// Thumbprint is the certificate's (SHA-1, upper-case hex).
	Thumbprint string
	// Transport is the first 16 bytes of the challenge's key-transport
	// hash (envelope.Challenge.TransportID) in hex, "" when no challenge
	// was read.
	Transport string
	Outcome   string
	Latency   time.Duration
}

// Guard is what a client's certificate logins keep between them: the key
// transports opened and each certificate's wait after failures. One is
// made by New; an agent that rebuilds its client on a reload hands the old
// one on (Config.Guard), so that a reload forgets nothing.
type Guard struct {
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	seen   map[[32]byte]time.Time // key transport -> when it may be forgotten
	floors map[string]floor       // certificate thumbprint -> its wait

	shared  atomic.Pointer[oncer]
	observe atomic.Pointer[func(CertLogin)]
}

type oncer struct{ store.Oncer }

type floor struct {
	until time.Time
	next  time.Duration
}

// NewGuard returns a guard that remembers a key transport for ttl
// (default DefaultTransportTTL), with now as its clock (default
// time.Now).
func NewGuard(ttl time.Duration, now func() time.Time) *Guard {
	if ttl <= 0 {
		ttl = DefaultTransportTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Guard{ttl: ttl, now: now, seen: map[[32]byte]time.Time{}, floors: map[string]floor{}}
}

// Share has the guard mark every key transport it opens in s too, so that
// the agents on one store open a key transport once between them (nil:
// this process's memory only).
func (g *Guard) Share(s store.Oncer) {
	if s == nil {
		g.shared.Store(nil)
		return
	}
	g.shared.Store(&oncer{s})
}

// Observe has f told of every certificate login (the agent's audit log
// and metrics).
func (g *Guard) Observe(f func(CertLogin)) { g.observe.Store(&f) }

func (g *Guard) report(l CertLogin) {
	if f := g.observe.Load(); f != nil {
		(*f)(l)
	}
}

// BackoffError is a certificate login not tried because the last one for
// the certificate failed a moment ago.
type BackoffError struct {
	Thumbprint string
	Wait       time.Duration
}

// Error says how long certificate logins are held back, and why.
func (e *BackoffError) Error() string {
	return fmt.Sprintf("certificate login for %s: the last one failed after the service's challenge; the next is allowed in %s (the wait doubles with each failure, up to %s)",
		e.Thumbprint, e.Wait.Round(time.Second), FloorMax)
}

// Is gives the error its kind: back off, then ask again.
func (e *BackoffError) Is(target error) bool { return target == errdefs.ErrBackoff }

// RetryAfter is how long to wait before trying again.
func (e *BackoffError) RetryAfter() time.Duration { return e.Wait }

// await waits for thumbprint's floor when ctx allows it, and otherwise
// returns a BackoffError at once.
func (g *Guard) await(ctx context.Context, thumbprint string) error {
	g.mu.Lock()
	f := g.floors[thumbprint]
	g.mu.Unlock()
	wait := f.until.Sub(g.now())
	if wait <= 0 {
		return nil
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
		return &BackoffError{Thumbprint: thumbprint, Wait: wait}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return &BackoffError{Thumbprint: thumbprint, Wait: wait}
	}
}

// failed starts or doubles thumbprint's wait; succeeded ends it.
func (g *Guard) failed(thumbprint string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.floors[thumbprint]
	next := FloorStart
	if f.next > 0 {
		next = min(2*f.next, FloorMax)
	}
	g.floors[thumbprint] = floor{until: g.now().Add(next), next: next}
	if len(g.floors) > maxSeen {
		now := g.now()
		for k, v := range g.floors {
			if now.After(v.until.Add(FloorMax)) {
				delete(g.floors, k)
			}
		}
	}
}

func (g *Guard) succeeded(thumbprint string) {
	g.mu.Lock()
	delete(g.floors, thumbprint)
	g.mu.Unlock()
}

// errReplayed and errUnverified are first's refusals.
var (
	errReplayed = errdefs.New(errdefs.ErrUnreachable, "the service's challenge repeats a key transport this certificate's key has already opened: "+
		"refused without asking the token (a genuine service makes a new one for every challenge; the business API address may not be the service's)")
	errUnverified = errdefs.New(errdefs.ErrStoreUnavailable, "the shared store does not answer, so it cannot tell whether another agent has opened this challenge's key transport: "+
		"the certificate login is refused until it answers")
)

// first marks id as opened and says nil when no one had: in this process's
// memory, then in the shared store when there is one. A store that does
// not answer refuses the login (errUnverified): the token opens nothing
// that another agent may have opened.
func (g *Guard) first(ctx context.Context, id [32]byte) error {
	now := g.now()
	g.mu.Lock()
	if exp, ok := g.seen[id]; ok && now.Before(exp) {
		g.mu.Unlock()
		return errReplayed
	}
	g.remember(id, now)
	g.mu.Unlock()
	sh := g.shared.Load()
	if sh == nil {
		return nil
	}
	fresh, err := sh.Once(ctx, transportKind, hex.EncodeToString(id[:]), g.ttl)
	switch {
	case err != nil:
		// Not opened: another try may open it once the store answers.
		g.mu.Lock()
		delete(g.seen, id)
		g.mu.Unlock()
		return fmt.Errorf("%w (%w)", errUnverified, err)
	case !fresh:
		return errReplayed
	}
	return nil
}

// remember keeps id until the guard's ttl from now; g.mu is held.
func (g *Guard) remember(id [32]byte, now time.Time) {
	if len(g.seen) >= maxSeen {
		var oldest [32]byte
		var at time.Time
		for k, exp := range g.seen {
			if !now.Before(exp) {
				delete(g.seen, k)
				continue
			}
			if at.IsZero() || exp.Before(at) {
				oldest, at = k, exp
			}
		}
		if len(g.seen) >= maxSeen {
			delete(g.seen, oldest)
		}
	}
	g.seen[id] = now.Add(g.ttl)
}

// outcomeOf names how a login that reached the service's challenge ended.
func outcomeOf(err error) string {
	var se *ServiceError
	switch {
	case err == nil:
		return CertOK
	case errors.Is(err, errReplayed):
		return CertReplayed
	case errors.Is(err, errUnverified):
		return CertUnverified
	case errors.As(err, &se):
		return CertRefused
	}
	return CertError
}
