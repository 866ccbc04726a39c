// Package authz is what a business call needs of an authentication
// scheme: the Authorization header value for one identity, and a way to
// forget a value the service refused. The trusted, legacy and OpenID
// Connect code each provide an Authorizer; callers know nothing else of
// the schemes.
package authz

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/signagent/signagent/errdefs"
)

// Authorizer gives the Authorization header for one identity.
type Authorizer interface {
	// Authorization returns the header value, cached or freshly obtained.
	Authorization(ctx context.Context) (string, error)
	// Reject forgets value, which the service answered 401 to, so that the
	// next Authorization obtains a new one.
	Reject(value string)
	// String names the scheme and identity, without a secret.
	String() string
}

// RefusedError is a 401 to a freshly obtained header value.
type RefusedError struct {
	Identity string // the Authorizer's String
	Status   int
	Code     string // X-Service-ErrorCode, when the service sent one
}

// Is gives the error its kind, errdefs.ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == errdefs.ErrRefused }

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
		v, err := a.Authorization(ctx)
		if err != nil {
			return nil, retried, err
		}
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
