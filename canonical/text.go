package canonical

import (
	"fmt"
	"strings"
	"time"

	"github.com/signagent/signagent/errdefs"
)

// TimeLayout is the service's timestamp format, dd.MM.yyyy HH:mm:ss, always in
// UTC (the specification says GMT) and with no zone suffix.
const TimeLayout = "02.01.2006 15:04:05"

// ErrInvalidTimestamp is wrapped by every timestamp parsing error.
var ErrInvalidTimestamp = errdefs.New(errdefs.ErrInvalidInput, "invalid timestamp")

// ErrInvalidAPIKey is returned when the API key is empty or malformed.
var ErrInvalidAPIKey = errdefs.New(errdefs.ErrInvalidInput, "invalid API key")

// ParseTimestamp parses s strictly as dd.MM.yyyy HH:mm:ss in UTC: every field
// has exactly its number of digits and the date must exist.
func ParseTimestamp(s string) (time.Time, error) {
	const shape = "dd.dd.dddd dd:dd:dd"
	if len(s) != len(shape) {
		return time.Time{}, fmt.Errorf("%w: %q is not dd.MM.yyyy HH:mm:ss", ErrInvalidTimestamp, s)
	}
	for i := 0; i < len(shape); i++ {
		if shape[i] == 'd' {
			if s[i] < '0' || s[i] > '9' {
				return time.Time{}, fmt.Errorf("%w: %q is not dd.MM.yyyy HH:mm:ss", ErrInvalidTimestamp, s)
			}
		} else if s[i] != shape[i] {
			return time.Time{}, fmt.Errorf("%w: %q is not dd.MM.yyyy HH:mm:ss", ErrInvalidTimestamp, s)
		}
	}
	t, err := time.ParseInLocation(TimeLayout, s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %q is not a real date and time", ErrInvalidTimestamp, s)
	}
	// Year 0 and 1 parse, but no such signature can be meant, and the
	// zero time would pass for "not set" downstream (signingTime = now).
	if t.Year() < 1970 {
		return time.Time{}, fmt.Errorf("%w: %q is before 1970", ErrInvalidTimestamp, s)
	}
	return t, nil
}

// FormatTimestamp formats t in UTC as dd.MM.yyyy HH:mm:ss.
func FormatTimestamp(t time.Time) string { return t.UTC().Format(TimeLayout) }

// Now returns the current time truncated to the second, in UTC: the default
// timestamp of a signed text.
func Now() time.Time { return time.Now().UTC().Truncate(time.Second) }

// NormalizeAPIKey trims surrounding white space (a key read from a file ends
// with a newline) and refuses an empty key or one with control characters.
// The key's case is kept: the signed text lower-cases it, the query does not.
func NormalizeAPIKey(key string) (string, error) {
	k := strings.TrimSpace(key)
	if k == "" {
		return "", fmt.Errorf("%w: the API key is empty", ErrInvalidAPIKey)
	}
	for _, r := range k {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("%w: the API key has a control character", ErrInvalidAPIKey)
		}
	}
	return k, nil
}

// Text is the exact signed text: three lines, each ended by CR LF:
//
//	apikey=<api key lower-cased>
//	id=<credential>
//	timestamp=<dd.MM.yyyy HH:mm:ss>
//
// The API key must already be normalized (see NormalizeAPIKey).
func Text(apiKey string, cred Credential, ts time.Time) []byte {
	lower := strings.ToLower(apiKey)
	stamp := FormatTimestamp(ts)
	b := make([]byte, 0, len("apikey=\r\nid=\r\ntimestamp=\r\n")+len(lower)+len(cred.Value)+len(stamp))
	b = append(b, "apikey="...)
	b = append(b, lower...)
	b = append(b, "\r\nid="...)
	b = append(b, cred.Value...)
	b = append(b, "\r\ntimestamp="...)
	b = append(b, stamp...)
	b = append(b, "\r\n"...)
	return b
}
