package httpx

import (
	"strings"
	"testing"
)

// TestTokenProblems: the tokens each rule takes, and for each kind of
// byte it refuses, the problem named (class and offset, not the token).
func TestTokenProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		check func(string) string
		good  []string
		bad   map[string]string // input: the problem named
	}{
		{"b64token", BearerTokenProblem, []string{"a", "abc-._~+/XYZ09", "YWJj==", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln", strings.Repeat("ab", 32)},
			map[string]string{
				"":          "it is empty",
				"=abc":      "it starts with '='",
				" abc":      "it starts with a space",
				"ab=c":      "it goes on after its '=' padding, at byte 3",
				"ab==\r\n":  "it goes on after its '=' padding, at byte 4",
				"ab\r\ncd":  "it holds a control byte (0x0d) at byte 2",
				"ab\x00":    "it holds a control byte (0x00) at byte 2",
				"ab\x7f":    "it holds a control byte (0x7f) at byte 2",
				"ab cd":     "it holds a space at byte 2",
				"abé":       "it holds a byte above 0x7f (0xc3) at byte 2",
				"ab,c":      `it holds ',' at byte 2`,
				`ab"c`:      `it holds '"' at byte 2`,
				"ab\tc":     "it holds a control byte (0x09) at byte 2",
				"abc\xff==": "it holds a byte above 0x7f (0xff) at byte 3",
			}},
		{"token_type", TokenProblem, []string{"Bearer", "bearer", "DPoP", "N_A", "x!#$%&'*+-.^_`|~"},
			map[string]string{
				"":               "it is empty",
				"Bearer\r\nX: y": "it holds a control byte (0x0d) at byte 6",
				"Bear er":        "it holds a space at byte 4",
				"Bearer/1":       `it holds '/' at byte 6`,
				"Bearer=":        `it holds '=' at byte 6`,
				"Béarer":         "it holds a byte above 0x7f (0xc3) at byte 1",
			}},
	} {
		for _, in := range tc.good {
			if p := tc.check(in); p != "" {
				t.Errorf("%s %q: %s", tc.name, in, p)
			}
		}
		for in, want := range tc.bad {
			if got := tc.check(in); got != want {
				t.Errorf("%s %q: %q, want %q", tc.name, in, got, want)
			}
		}
	}
}
