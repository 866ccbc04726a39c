package legacy

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/flight"
	"github.com/signagent/signagent/store"
)

// Identity is who authenticates and how. Subject names the user without a
// secret (the login, the certificate's thumbprint, the trusted credential
// behind a sid): it keys the cache and appears in logs and errors.
type Identity struct {
	By      Method
	Subject string
	// CacheKey, when set, keys the cache instead of Subject: for an
	// identity whose Subject is masked (a phone number's last digits) and
	// so may name two people. It is never logged.
	CacheKey string

	Password    string            // ByPassword
	Certificate *x509.Certificate // ByCertificate, with Key on the token
	Key         crypto.Decrypter
	// Sid obtains the auth.sid to exchange (BySid): read from a file, or
	// the trusted flow run on demand.
	Sid func(ctx context.Context) (string, error)
	// Drop, when set, forgets the auth.sid Sid gave, which the service no
	// longer takes; it reports whether Sid will give another.
	Drop func() bool
}

// String names the identity without a secret: its way in and subject.
func (id Identity) String() string { return string(id.By) + " " + id.Subject }

func (id Identity) cacheKey() string {
	if id.CacheKey != "" {
		return string(id.By) + "\x00\x00" + id.CacheKey
	}
	return string(id.By) + "\x00" + id.Subject
}

// Authenticate obtains a new token for id, without the cache.
func (c *Client) Authenticate(ctx context.Context, id Identity) (Token, error) {
	switch id.By {
	case ByPassword:
		return c.Password(ctx, id.Subject, id.Password)
	case ByCertificate:
		return c.Certificate(ctx, id.Certificate, id.Key)
	case BySid:
		if id.Sid == nil {
			return Token{}, fmt.Errorf("%w: no auth.sid to exchange", errdefs.ErrInvalidInput)
		}
		sid, err := id.Sid(ctx)
		if err != nil {
			return Token{}, err
		}
		return c.Sid(ctx, sid)
	}
	_, err := ParseMethod(string(id.By))
	return Token{}, err
}

// Tokens caches tokens per identity until a margin before they expire,
// runs one authentication at a time per identity (callers asking at the
// same time share it), and forgets a token the service refused.
type Tokens struct {
	client  *Client
	margin  time.Duration
	timeout time.Duration
	now     func() time.Time
	group   flight.Group[Token]

	mu      sync.Mutex
	entries map[string]Token
	sweepAt int

	// shared, when set, is the store the agents on it share tokens in.
	shared atomic.Pointer[sharedTokens]
}

// tokenKind is the legacy tokens' kind in a shared store.
const tokenKind = "legacy"

// sharedTokens is a shared store and the developer key's digest: tokens
// of another integrator never mix.
type sharedTokens struct {
	s   store.Records
	dev string
}

// Share keeps the tokens in s as well, so that the agents on it make one
// login per identity, not one each (nil: this process's memory only).
//
// A store that can mark things once (store.Oncer) also keeps the key
// transports the certificate logins have opened (Guard.Share).
func (t *Tokens) Share(s store.Records) {
	if s == nil {
		t.shared.Store(nil)
		t.client.guard.Share(nil)
		return
	}
	if o, ok := s.(store.Oncer); ok {
		t.client.guard.Share(o)
	}
	sum := sha256.Sum256([]byte("signagent developer\x00" + t.client.key))
	t.shared.Store(&sharedTokens{s: s, dev: hex.EncodeToString(sum[:8])})
}

// storeCtx bounds a store call made outside a caller's request.
func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*store.DefaultTimeout)
}

// dropShared removes id's token from the shared store when match accepts
// it (best effort: a store that does not answer keeps it until it expires).
func (t *Tokens) dropShared(k string, match func(Token) bool) {
	sh := t.shared.Load()
	if sh == nil {
		return
	}
	ctx, cancel := storeCtx()
	defer cancel()
	store.DeleteIf(ctx, sh.s, tokenKind, sh.dev+"\x00"+k, func(b []byte) bool {
		var tok Token
		return json.Unmarshal(b, &tok) == nil && match(tok)
	})
}

// NewTokens returns a cache over client. A token is reused until margin
// before its expiry (default: a tenth of its lifetime, at most 10 minutes).
// timeout bounds one authentication run for all who wait on it (default
// 2m): it runs detached from any one caller, so that a caller giving up
// does not fail the others.
func NewTokens(client *Client, margin, timeout time.Duration) *Tokens {
	if margin <= 0 {
		margin = min(client.cfg.TokenTTL/10, 10*time.Minute)
	}
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	return &Tokens{client: client, margin: margin, timeout: timeout, now: client.cfg.Now, entries: map[string]Token{}, sweepAt: 1024}
}

// Client returns the client the cache authenticates with.
func (t *Tokens) Client() *Client { return t.client }

// Token returns a valid token for id, cached or new; cached reports
// whether no authentication ran for this call.
func (t *Tokens) Token(ctx context.Context, id Identity) (tok Token, cached bool, err error) {
	tok, from, err := t.TokenFrom(ctx, id)
	return tok, from != FromLogin, err
}

// Where a token came from: this process's memory, the shared store
// (another agent logged in), or a login just now.
const (
	FromMemory = flight.FromMemory
	FromStore  = "store"
	FromLogin  = "login"
)

// TokenFrom is Token saying where the token came from: FromMemory,
// FromStore or FromLogin.
func (t *Tokens) TokenFrom(ctx context.Context, id Identity) (Token, string, error) {
	k := id.cacheKey()
	if tok, ok := t.get(k); ok {
		return tok, FromMemory, nil
	}
	// One login per identity at a time; see flight for who is told it.
	return t.group.Do(ctx, k, func() (Token, string, error) {
		if tok, ok := t.get(k); ok { // another flight finished meanwhile
			return tok, FromMemory, nil
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.timeout)
		defer cancel()
		if sh := t.shared.Load(); sh != nil {
			b, fromStore, err := store.Obtain(fctx, sh.s, tokenKind, sh.dev+"\x00"+k,
				func(b []byte) bool {
					var tok Token
					return json.Unmarshal(b, &tok) == nil && tok.Value != "" && t.now().Before(tok.ExpiresAt.Add(-t.margin))
				},
				func(ctx context.Context) ([]byte, time.Duration, error) {
					tok, err := t.client.Authenticate(ctx, id)
					if err != nil {
						return nil, 0, err
					}
					b, err := json.Marshal(tok)
					return b, max(tok.ExpiresAt.Sub(t.now()), time.Second), err
				})
			var tok Token
			switch {
			case err == nil && json.Unmarshal(b, &tok) == nil:
				t.put(k, tok)
				if fromStore {
					return tok, FromStore, nil
				}
				return tok, FromLogin, nil
			case err != nil && !errors.Is(err, store.ErrUnavailable):
				return Token{}, "", err
			}
			// The store does not answer: log in here.
		}
		tok, err := t.client.Authenticate(fctx, id)
		if err != nil {
			return Token{}, "", err
		}
		t.put(k, tok)
		return tok, FromLogin, nil
	})
}

// Reject forgets id's token when it is value (a token the service answered
// 401 to), so that the next Token authenticates again; a newer token that
// another caller obtained meanwhile is kept. It reports whether it dropped
// one.
func (t *Tokens) Reject(id Identity, value string) bool {
	k := id.cacheKey()
	t.dropShared(k, func(tok Token) bool { return tok.Value == value })
	t.mu.Lock()
	defer t.mu.Unlock()
	if tok, ok := t.entries[k]; ok && tok.Value == value {
		delete(t.entries, k)
		return true
	}
	return false
}

// Forget drops id's token, whatever it is (a caller asking for a fresh
// one); it reports whether there was one.
func (t *Tokens) Forget(id Identity) bool {
	k := id.cacheKey()
	t.dropShared(k, func(Token) bool { return true })
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.entries[k]
	delete(t.entries, k)
	return ok
}

// ForgetOlder drops id's token when it was obtained at least age ago (a
// caller asking for a fresh one: a token obtained a moment ago is as fresh
// as a new login would give, and a login costs the service a request with
// the integrator's developer key). It reports whether it dropped one.
func (t *Tokens) ForgetOlder(id Identity, age time.Duration) bool {
	k := id.cacheKey()
	t.dropShared(k, func(tok Token) bool { return t.now().Sub(tok.ObtainedAt) >= age })
	t.mu.Lock()
	defer t.mu.Unlock()
	tok, ok := t.entries[k]
	if !ok || t.now().Sub(tok.ObtainedAt) < age {
		return false
	}
	delete(t.entries, k)
	return true
}

// Len is how many tokens the cache holds.
func (t *Tokens) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

func (t *Tokens) get(k string) (Token, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tok, ok := t.entries[k]
	if ok && !t.now().Before(tok.ExpiresAt.Add(-t.margin)) {
		delete(t.entries, k)
		return Token{}, false
	}
	return tok, ok
}

func (t *Tokens) put(k string, tok Token) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entries[k] = tok
	if len(t.entries) < t.sweepAt {
		return
	}
	now := t.now()
	for key, e := range t.entries {
		if !now.Before(e.ExpiresAt.Add(-t.margin)) {
			delete(t.entries, key)
		}
	}
	t.sweepAt = max(1024, 2*len(t.entries))
}

// For is id as an authz.Authorizer: the business-call header from the
// cache.
func (t *Tokens) For(id Identity) authz.Authorizer { return authorizer{t, id} }

type authorizer struct {
	t  *Tokens
	id Identity
}

// Header is the identity's token as a header. An auth.sid the service no
// longer takes (a 401 other than a refused login) is dropped where it came
// from (id.Drop) and the token obtained once more with a new one.
func (a authorizer) Header(ctx context.Context) (authz.Header, error) {
	tok, from, err := a.t.TokenFrom(ctx, a.id)
	var se *ServiceError
	if errors.As(err, &se) && se.Status == http.StatusUnauthorized && se.Code != CodeAuth && a.id.Drop != nil && a.id.Drop() {
		tok, from, err = a.t.TokenFrom(ctx, a.id)
	}
	if err != nil {
		return authz.Header{}, err
	}
	return authz.Header{Value: a.t.client.Header(tok.Value), ExpiresAt: tok.ExpiresAt, Cached: from != FromLogin, Source: from}, nil
}

func (a authorizer) Reject(value string) {
	_, tok, err := ParseHeader(value)
	if err == nil {
		a.t.Reject(a.id, tok)
	}
}

func (a authorizer) Forget(age time.Duration) { a.t.ForgetOlder(a.id, age) }
func (a authorizer) Identity() string         { return a.id.String() }
func (a authorizer) String() string           { return "the legacy token of " + a.id.String() }
