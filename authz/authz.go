// Package authz is where the authentication schemes meet the callers of
// the service. A Scheme makes an Authorizer of a Selector naming one of its
// identities; an Authorizer gives the Authorization header value with its
// expiry and where it came from, drops a value the service refused and
// forgets the identity's cached value. The legacy and OpenID Connect
// packages each provide a Scheme (the trusted flow is legacy by auth.sid);
// the agent's /v1/authorizations and proxy and the CLI's api command go
// through Schemes.Authorizer and Do or Retry, and know nothing else of the
// schemes.
package authz

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// Header is an Authorization header value as a scheme gives it.
type Header struct {
	Value     string
	ExpiresAt time.Time
	// Cached is true when no login or refresh ran for this value.
	Cached bool
	// Source is where the value came from, in the scheme's words (memory,
	// store, login, refresh): the agent counts them.
	Source string
	// Subject is who the value speaks for, when the scheme learnt it
	// (the OpenID Connect subject); never a secret.
	Subject string
}

// Authorizer gives the Authorization header for one identity.
type Authorizer interface {
	// Header returns the header value, cached or freshly obtained.
	Header(ctx context.Context) (Header, error)
	// Reject forgets value, which the service answered 401 to, so that the
	// next Header obtains a new one.
	Reject(value string)
	// Forget drops the identity's cached value when it was obtained at
	// least age ago (0: whatever its age), so that the next Header obtains
	// a new one: a caller asking for a fresh value.
	Forget(age time.Duration)
	// Identity names the identity within its scheme, without a secret
	// (for the audit log).
	Identity() string
	// String names the scheme and identity, without a secret.
	String() string
}

// Scheme is one authentication scheme: the Authorizer of a checked
// Selector naming it.
type Scheme interface {
	// Name is the Selector's Scheme this scheme serves.
	Name() string
	// Authorizer resolves sel (checked, naming this scheme) to one
	// identity. It may refuse: a login it has no password for, a profile
	// name that is not one.
	Authorizer(sel Selector) (Authorizer, error)
}

// Schemes is the list of schemes a caller serves, built explicitly where
// the program is wired (there is no registry).
type Schemes []Scheme

// Authorizer is the Authorizer of the scheme sel names; a scheme not in
// the list is invalid input naming those that are.
func (l Schemes) Authorizer(sel Selector) (Authorizer, error) {
	var names []string
	for _, s := range l {
		if s.Name() == sel.Scheme {
			return s.Authorizer(sel)
		}
		names = append(names, s.Name())
	}
	want := strings.Join(names, " or ")
	if n := len(names); n > 2 {
		want = strings.Join(names[:n-1], ", ") + " or " + names[n-1]
	}
	return nil, errdefs.Mark(fmt.Errorf("scheme %q: want %s", httpx.Printable(sel.Scheme, 32), want), errdefs.ErrInvalidInput)
}

// Names are the schemes' names, in the list's order.
func (l Schemes) Names() []string {
	names := make([]string, len(l))
	for i, s := range l {
		names[i] = s.Name()
	}
	return names
}

// Off is a scheme the caller knows but was not configured for: every
// Authorizer is err.
func Off(name string, err error) Scheme { return off{name, err} }

type off struct {
	name string
	err  error
}

func (o off) Name() string                            { return o.name }
func (o off) Authorizer(Selector) (Authorizer, error) { return nil, o.err }

// RefusedError is a 401 to a freshly obtained header value.
type RefusedError struct {
	Identity string // the Authorizer's String
	Status   int
	Code     string // X-Service-ErrorCode, when the service sent one
}

// Is gives the error its kind, errdefs.ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == errdefs.ErrRefused }

// Error says what the service refused.
func (e *RefusedError) Error() string {
	msg := fmt.Sprintf("the service refused %s (HTTP %d", e.Identity, e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	return msg + ") even with a newly obtained authorization"
}

// Do sends a request with a's header; on a 401 it rejects that value,
// obtains a new one and sends once more. A second 401 is a *RefusedError.
// send must be repeatable (build a new request each time).
func Do(ctx context.Context, a Authorizer, send func(ctx context.Context, authorization string) (*http.Response, error)) (*http.Response, error) {
	resp, _, err := Retry(ctx, a, send)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	code := serviceCode(resp)
	discard(resp)
	return nil, &RefusedError{Identity: a.String(), Status: resp.StatusCode, Code: code}
}

// Retry is Do for a caller that passes the service's answer on: the
// second 401 is returned as it came (its body unread), and retried says
// whether the first value was refused.
func Retry(ctx context.Context, a Authorizer, send func(ctx context.Context, authorization string) (*http.Response, error)) (resp *http.Response, retried bool, err error) {
	for attempt := 1; ; attempt++ {
		h, err := a.Header(ctx)
		if err != nil {
			return nil, retried, err
		}
		v := h.Value
		resp, err := send(ctx, v)
		if err != nil || resp.StatusCode != http.StatusUnauthorized || attempt == 2 {
			return resp, retried, err
		}
		discard(resp)
		a.Reject(v)
		retried = true
	}
}

// serviceCode is the answer's X-Service-ErrorCode: the service's, so at
// most a short printable word here.
func serviceCode(resp *http.Response) string {
	code := strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' {
			return -1
		}
		return r
	}, resp.Header.Get("X-Service-ErrorCode"))
	if len(code) > 80 {
		code = code[:80]
	}
	return code
}

// discard reads a little of an answer that is not passed on (so that the
// connection can be reused) and closes it.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}
