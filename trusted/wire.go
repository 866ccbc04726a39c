package trusted

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strings"
	"unicode"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/secret"
)

// Link is the service's link for confirming an authentication request.
type Link struct {
	Rel  string `json:"Rel"`
	Href string `json:"Href"`
}

// Challenge is the answer to authenticate-by-truster.
type Challenge struct {
	Key  string `json:"Key"`
	Link Link   `json:"Link"`
}

// maxBody bounds what is read of any answer; a longer success is refused
// (an error status is reported by its status).
const maxBody = 64 << 10

var errEmptyField = errors.New("a required field is missing or empty")

// ParseChallenge decodes step 1's answer. Names match case-insensitively and
// unknown fields are ignored, as the wire notes advise.
func ParseChallenge(body []byte) (*Challenge, error) {
	var c Challenge
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("the answer is not the expected JSON: %w", err)
	}
	if strings.TrimSpace(c.Key) == "" {
		return nil, fmt.Errorf("%w: Key", errEmptyField)
	}
	return &c, nil
}

// ParseSid decodes step 2's answer: JSON {"Sid": "..."} or a text/plain Sid.
func ParseSid(contentType string, body []byte) (string, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	trimmed := strings.TrimSpace(string(body))
	if mt == "text/plain" || (mt == "" && !strings.HasPrefix(trimmed, "{")) {
		sid := strings.Trim(trimmed, `"`)
		if sid == "" || strings.ContainsFunc(sid, unicode.IsSpace) {
			return "", fmt.Errorf("%w: the plain-text Sid is empty or has white space", errEmptyField)
		}
		return sid, nil
	}
	var v struct {
		Sid string `json:"Sid"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("the answer is not the expected JSON: %w", err)
	}
	if strings.TrimSpace(v.Sid) == "" {
		return "", fmt.Errorf("%w: Sid", errEmptyField)
	}
	return v.Sid, nil
}

// ParseErrorCode returns the service's error code from an error body such as
// {"Code": "UserNotFound"}, or "" when there is none. Only a short
// identifier is returned, so a body never carries arbitrary text (or an echo
// of a secret) into an error message.
func ParseErrorCode(body []byte) string {
	var v struct {
		Code string `json:"Code"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	if len(v.Code) == 0 || len(v.Code) > 64 {
		return ""
	}
	for _, r := range v.Code {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return ""
		}
	}
	return v.Code
}

// queryEscape percent-encodes everything but RFC 3986's unreserved
// characters; a space becomes %20, not '+' (wire notes).
func queryEscape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

// query builds a query string in the order given.
func query(pairs ...[2]string) string {
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(queryEscape(p[0]))
		b.WriteByte('=')
		b.WriteString(queryEscape(p[1]))
	}
	return b.String()
}

// secretParams are the query parameters masked whenever a URL is shown.
var secretParams = map[string]bool{"apikey": true, "api-key": true, "key": true}

// MaskURL returns u with secret query values masked as first four
// characters, an ellipsis and the length (apiKey=1f2e…(36)), and credential
// values reduced to their last four characters.
func MaskURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	c.User = nil
	var parts []string
	for _, kv := range strings.Split(u.RawQuery, "&") {
		name, raw, ok := strings.Cut(kv, "=")
		if !ok {
			parts = append(parts, kv)
			continue
		}
		val, err := url.QueryUnescape(raw)
		if err != nil {
			val = raw
		}
		switch n := strings.ToLower(name); {
		case secretParams[n]:
			raw = secret.Mask(val)
		case n == "phone" || n == "snils" || n == "thumbprint" || n == "id" || n == "credential":
			raw = canonical.MaskTail(val)
		}
		parts = append(parts, name+"="+raw)
	}
	c.RawQuery = ""
	s := c.String()
	if u.RawQuery != "" {
		s += "?" + strings.Join(parts, "&")
	}
	return s
}
