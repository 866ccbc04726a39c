package oidc

import (
	"fmt"

	"github.com/signagent/signagent/internal/httpx"
)

// The access token goes into the Authorization header of every business
// call made for its profile, so its bytes are checked wherever one is
// taken (a token answer, a record read back from a store) as the legacy
// scheme checks its token: a provider, or someone who can write the
// records, must not be able to put a CR LF, a NUL or a space into the
// head of those requests (httpx.BearerTokenProblem, httpx.TokenProblem).
// The messages say what is wrong and where, never the token itself.

// checkAnswer refuses a token answer whose access_token or token_type
// could not go into a request's head as they are: a TransportError (the
// provider answered what cannot be used), naming the step, the field and
// the first bad byte's class and offset.
func (c *Client) checkAnswer(step, access, tokenType string) error {
	problem := func(field, rule, p string) error {
		return &httpx.TransportError{Peer: idp, Step: step, URL: c.base.String(),
			Msg: fmt.Sprintf("answered %s that is not %s (%s); it was not used", field, rule, p)}
	}
	if p := httpx.BearerTokenProblem(access); p != "" {
		return problem("an access_token", "an RFC 6750 bearer token", p)
	}
	if p := httpx.TokenProblem(tokenType); p != "" {
		return problem("a token_type", "an HTTP token", p)
	}
	return nil
}

// tokensProblem says what makes a record's access token or token type
// unfit for a request's head (a record written by hand or by an older
// version), or "" when they are fit. An empty token type is Bearer.
func (r *Record) tokensProblem() string {
	if p := httpx.BearerTokenProblem(r.AccessToken); p != "" {
		return "its access token is not an RFC 6750 bearer token (" + p + ")"
	}
	if r.TokenType != "" {
		if p := httpx.TokenProblem(r.TokenType); p != "" {
			return "its token type is not an HTTP token (" + p + ")"
		}
	}
	return ""
}
