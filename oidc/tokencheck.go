package oidc

import (
	"fmt"
	"strings"

	"github.com/signagent/signagent/internal/httpx"
)

// The access token goes into the Authorization header of every business
// call made for its profile, so its bytes are checked wherever one is
// taken (a token answer, a record read back from a store) as the legacy
// scheme checks its token: a provider, or someone who can write the
// records, must not be able to put a CR LF, a NUL or a space into the
// head of those requests. The messages say what is wrong and where, never
// the token itself.

// tokenProblem says what makes s other than RFC 6750 (2.1)'s b64token,
//
//	1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
//
// or "" when it is one. It names the first bad byte's class and offset,
// not the token.
func tokenProblem(s string) string {
	if s == "" {
		return "it is empty"
	}
	i := 0
	for i < len(s) && b64char(s[i]) {
		i++
	}
	if i == 0 {
		return "it starts with " + byteClass(s[0])
	}
	j := i
	for j < len(s) && s[j] == '=' {
		j++
	}
	if j == len(s) {
		return ""
	}
	if j > i {
		return fmt.Sprintf("it goes on after its '=' padding, at byte %d", j)
	}
	return fmt.Sprintf("it holds %s at byte %d", byteClass(s[j]), j)
}

// typeProblem says what makes s other than an HTTP token (RFC 7230
// 3.2.6: 1*tchar), or "" when it is one.
func typeProblem(s string) string {
	if s == "" {
		return "it is empty"
	}
	for i := 0; i < len(s); i++ {
		if !tchar(s[i]) {
			return fmt.Sprintf("it holds %s at byte %d", byteClass(s[i]), i)
		}
	}
	return ""
}

func alnum(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}

func b64char(c byte) bool { return alnum(c) || strings.IndexByte("-._~+/", c) >= 0 }

func tchar(c byte) bool { return alnum(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 }

// byteClass names a byte that has no place in a token: its class and
// value, which for a byte outside the token's alphabet says nothing of
// the token.
func byteClass(c byte) string {
	switch {
	case c == ' ':
		return "a space"
	case c < 0x20 || c == 0x7f:
		return fmt.Sprintf("a control byte (0x%02x)", c)
	case c >= 0x80:
		return fmt.Sprintf("a byte above 0x7f (0x%02x)", c)
	case c == '=':
		return "'='"
	}
	return fmt.Sprintf("%q", rune(c))
}

// checkAnswer refuses a token answer whose access_token or token_type
// could not go into a request's head as they are: a TransportError (the
// provider answered what cannot be used), naming the step, the field and
// the first bad byte's class and offset.
func (c *Client) checkAnswer(step, access, tokenType string) error {
	problem := func(field, rule, p string) error {
		return &httpx.TransportError{Peer: idp, Step: step, URL: c.base.String(),
			Msg: fmt.Sprintf("answered %s that is not %s (%s); it was not used", field, rule, p)}
	}
	if p := tokenProblem(access); p != "" {
		return problem("an access_token", "an RFC 6750 bearer token", p)
	}
	if p := typeProblem(tokenType); p != "" {
		return problem("a token_type", "an HTTP token", p)
	}
	return nil
}

// tokensProblem says what makes a record's access token or token type
// unfit for a request's head (a record written by hand or by an older
// version), or "" when they are fit. An empty token type is Bearer.
func (r *Record) tokensProblem() string {
	if p := tokenProblem(r.AccessToken); p != "" {
		return "its access token is not an RFC 6750 bearer token (" + p + ")"
	}
	if r.TokenType != "" {
		if p := typeProblem(r.TokenType); p != "" {
			return "its token type is not an HTTP token (" + p + ")"
		}
	}
	return ""
}
