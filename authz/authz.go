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
	for attempt := 1; ; attempt++ {
		v, err := a.Authorization(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := send(ctx, v)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			return resp, err
		}
		// The code is the service's: at most a short printable word here.
		code := strings.Map(func(r rune) rune {
			if r <= ' ' || r > '~' {
				return -1
			}
			return r
		}, resp.Header.Get("X-Service-ErrorCode"))
		if len(code) > 80 {
			code = code[:80]
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		a.Reject(v)
		if attempt == 2 {
			return nil, &RefusedError{Identity: a.String(), Status: resp.StatusCode, Code: code}
		}
	}
}
