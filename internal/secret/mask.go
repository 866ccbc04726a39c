package secret

import "fmt"

// Mask shows a secret value (a token, an auth.sid, an API key) as its
// first four characters and its length, or its length alone when it is
// short: enough to tell two apart in a log, never enough to use one. It is
// the one masking of secret values; credentials are masked by
// canonical.MaskTail.
func Mask(s string) string {
	if len(s) <= 8 {
		return fmt.Sprintf("…(%d)", len(s))
	}
	return fmt.Sprintf("%s…(%d)", s[:4], len(s))
}
