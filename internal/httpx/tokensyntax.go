package httpx

import (
	"fmt"
	"strings"
)

// What may go into a request's head as it is: a token answered by a
// provider or read back from a store is checked before it is, so that no
// CR LF, NUL or space can reach the head of the requests made with it.
// The problems name the first bad byte's class and offset, never the
// token.

// BearerTokenProblem says what makes s other than RFC 6750 (2.1)'s
// b64token, what a bearer token must be to go into an Authorization
// header as it is,
//
//	1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
//
// or "" when it is one. It names the first bad byte's class and offset,
// not the token.
func BearerTokenProblem(s string) string {
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

// TokenProblem says what makes s other than an HTTP token (RFC 7230
// 3.2.6: 1*tchar), or "" when it is one.
func TokenProblem(s string) string {
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
