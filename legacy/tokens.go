package legacy

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/signagent/signagent/authz"
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
}

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
			return Token{}, fmt.Errorf("%w: no auth.sid to exchange", ErrInvalidInput)
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
	group   singleflight.Group

	mu      sync.Mutex
	entries map[string]Token
	sweepAt int
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
	k := id.cacheKey()
	if tok, ok := t.get(k); ok {
		return tok, true, nil
	}
	ch := t.group.DoChan(k, func() (any, error) {
		if tok, ok := t.get(k); ok { // another flight finished meanwhile
			return tok, nil
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.timeout)
		defer cancel()
		tok, err := t.client.Authenticate(fctx, id)
		if err != nil {
			return nil, err
		}
		t.put(k, tok)
		return tok, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return Token{}, false, r.Err
		}
		return r.Val.(Token), false, nil
	case <-ctx.Done():
		return Token{}, false, ctx.Err()
	}
}

// Reject forgets id's token when it is value (a token the service answered
// 401 to), so that the next Token authenticates again; a newer token that
// another caller obtained meanwhile is kept. It reports whether it dropped
// one.
func (t *Tokens) Reject(id Identity, value string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := id.cacheKey()
	if tok, ok := t.entries[k]; ok && tok.Value == value {
		delete(t.entries, k)
		return true
	}
	return false
}

// Forget drops id's token, whatever it is (a caller asking for a fresh
// one); it reports whether there was one.
func (t *Tokens) Forget(id Identity) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.entries[id.cacheKey()]
	delete(t.entries, id.cacheKey())
	return ok
}

// ForgetOlder drops id's token when it was obtained at least age ago (a
// caller asking for a fresh one: a token obtained a moment ago is as fresh
// as a new login would give, and a login costs the service a request with
// the integrator's developer key). It reports whether it dropped one.
func (t *Tokens) ForgetOlder(id Identity, age time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := id.cacheKey()
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

func (a authorizer) Authorization(ctx context.Context) (string, error) {
	tok, _, err := a.t.Token(ctx, a.id)
	if err != nil {
		return "", err
	}
	return a.t.client.Header(tok.Value), nil
}

func (a authorizer) Reject(value string) {
	_, tok, err := ParseHeader(value)
	if err == nil {
		a.t.Reject(a.id, tok)
	}
}

func (a authorizer) String() string { return "the legacy token of " + a.id.String() }
