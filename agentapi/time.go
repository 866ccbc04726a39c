package agentapi

import (
	"fmt"
	"time"
)

// TimeFormat is how the agent writes every time in its JSON: RFC 3339 in
// UTC with milliseconds, always three digits (2026-11-28T17:22:47.123Z),
// so that partners' parsers meet one shape and times sort as text.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Time is a time in the agent's JSON: written as TimeFormat, read in any
// RFC 3339 precision (whole seconds to nanoseconds, any offset), so that
// a client reads an agent of an earlier release, which wrote Go's default
// (nanoseconds, local offset), as well as this one. It embeds time.Time:
// its methods (Before, IsZero, UTC...) are Time's own.
type Time struct{ time.Time }

// At wraps t.
func At(t time.Time) Time { return Time{t} }

// MarshalJSON writes t in UTC with milliseconds (truncated, never
// rounded up past the instant).
func (t Time) MarshalJSON() ([]byte, error) {
	if y := t.UTC().Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("agentapi.Time: year %d outside RFC 3339", y)
	}
	b := make([]byte, 0, len(TimeFormat)+2)
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, TimeFormat)
	return append(b, '"'), nil
}

// UnmarshalJSON reads an RFC 3339 time in any precision; null leaves t
// as it is.
func (t *Time) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("agentapi.Time: %s is not an RFC 3339 string", b)
	}
	v, err := time.Parse(time.RFC3339Nano, string(b[1:len(b)-1]))
	if err != nil {
		return fmt.Errorf("agentapi.Time: %w", err)
	}
	t.Time = v
	return nil
}
