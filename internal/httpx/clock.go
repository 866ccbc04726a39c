package httpx

import (
	"net/http"
	"time"
)

// ClockSkew is how far the peer's clock is ahead of this machine's (negative:
// behind), read from the answer's Date header (RFC 9110 6.6.1: whole seconds)
// against sent, when the request was sent, taken to the whole second too, so
// that an answer in the same second measures no skew of its own. ok is false
// without a Date header a clock could be read from.
func ClockSkew(h http.Header, sent time.Time) (skew time.Duration, ok bool) {
	v := h.Get("Date")
	if v == "" {
		return 0, false
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return SkewAt(t, sent), true
}

// SkewAt is ClockSkew of a Date header already parsed: date against sent
// taken to the whole second.
func SkewAt(date, sent time.Time) time.Duration { return date.Sub(sent.Truncate(time.Second)) }

// DescribeSkew says a skew ClockSkew measured as the fix's premise: "this
// machine's clock is 10m0s behind the service's".
func DescribeSkew(skew time.Duration, peer string) string {
	switch {
	case skew > 0:
		return "this machine's clock is " + skew.Round(time.Second).String() + " behind " + peer + "'s"
	case skew < 0:
		return "this machine's clock is " + (-skew).Round(time.Second).String() + " ahead of " + peer + "'s"
	}
	return "this machine's clock agrees with " + peer + "'s to the second"
}
