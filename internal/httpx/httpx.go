// Package httpx holds what the HTTP clients (trusted, legacy, oidc,
// service) share: the base-address check, an HTTP client that never
// follows a redirect, jittered backoff, error clean-up, the one error
// for a request that got no usable answer (TransportError), and what a
// token must be to go into a request's head as it is.
package httpx

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/signagent/signagent/errdefs"
)

// IsLoopback reports whether host names this machine: localhost or a
// loopback address.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ParseBaseURL checks a service address: https unless allowHTTP or the host
// is loopback (a URL without a scheme is https), no user info, query or
// fragment; a trailing slash is dropped. The error says what is wrong
// without the URL's user info.
func ParseBaseURL(raw string, allowHTTP bool) (*url.URL, error) {
	base := strings.TrimRight(strings.TrimSpace(raw), "/")
	if base != "" && !strings.Contains(base, "://") {
		base = "https://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("URL %q must be https://host[:port][/prefix]", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("the URL must not carry user info, a query or a fragment")
	}
	if u.Scheme == "http" && !allowHTTP && !IsLoopback(u.Hostname()) {
		return nil, fmt.Errorf("URL %s is plain http to a non-loopback host; use https (or --insecure-http if you really mean it)", u.Redacted())
	}
	return u, nil
}

// Client returns a copy of c (nil: one with sensible transport time-outs
// whose answer heads are bounded by the default HeadLimits, Transport)
// that never follows a redirect: a redirect would carry the request's
// secrets (API key, developer key) somewhere else.
func Client(c *http.Client) *http.Client {
	if c == nil {
		c = &http.Client{Transport: Transport(HeadLimits{})}
	}
	cp := *c
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// Transport is the transport of the clients to services and providers:
// sensible time-outs, the environment's proxy, HTTP/2 where the peer
// speaks it, and every answer head within l (BoundHeads; net/http's
// Transport alone reads up to 10 MiB of head, in any number of fields).
func Transport(l HeadLimits) http.RoundTripper {
	return BoundHeads(&http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   16,
		ForceAttemptHTTP2:     true,
	}, l)
}

// MaxBackoff caps one wait between attempts, however many were made.
const MaxBackoff = 30 * time.Second

// MaxRetryAfter caps how long a service's Retry-After is honoured: a
// longer one is taken as this long (and the caller's deadline still ends
// the attempts at once when it comes first).
const MaxRetryAfter = 2 * time.Minute

// BackoffDelay is the wait before retry n (1-based): a random time up to
// base*2^(n-1) (full jitter), never more than MaxBackoff.
func BackoffDelay(base time.Duration, n int) time.Duration {
	ceiling := MaxBackoff
	if base <= 0 {
		return 0
	}
	if n >= 1 && n < 32 && base <= MaxBackoff>>(n-1) {
		ceiling = base << (n - 1)
	}
	if j, err := rand.Int(rand.Reader, big.NewInt(int64(ceiling)+1)); err == nil {
		return time.Duration(j.Int64())
	}
	return ceiling / 2
}

// RetryAfter reads a Retry-After header (RFC 9110 10.2.3): delay-seconds
// or an HTTP date, taken relative to now. A date in the past is no wait; a
// value past MaxRetryAfter is MaxRetryAfter; ok is false when there is no
// header or it is neither form.
func RetryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		if n > uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), MaxRetryAfter), true
}

// ErrNoTimeLeft is a wait before a retry that would end past the caller's
// deadline: the attempts end now instead of sleeping into it.
var ErrNoTimeLeft = errors.New("no time is left for another attempt")

// CheckWait says whether a wait of d before another attempt ends before
// ctx's deadline: ErrNoTimeLeft when it would not.
func CheckWait(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return fmt.Errorf("%w: the next would start %s from now, past the deadline", ErrNoTimeLeft, d.Round(time.Millisecond))
	}
	return nil
}

// Wait sleeps d before another attempt, or returns at once with
// ErrNoTimeLeft when ctx's deadline comes first, or with ctx's error when
// ctx ends while it waits.
func Wait(ctx context.Context, d time.Duration) error {
	if err := CheckWait(ctx, d); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backoff waits before retry n (1-based) as BackoffDelay says, or until
// ctx is done.
func Backoff(ctx context.Context, base time.Duration, n int) error {
	return Wait(ctx, BackoffDelay(base, n))
}

// RetryDelay is the wait before retry n: the service's Retry-After when
// it asked for one (retryAfter > 0), else the backoff.
func RetryDelay(base time.Duration, n int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return retryAfter
	}
	return BackoffDelay(base, n)
}

// IsTimeout reports whether err (from a request under ctx) is a time-out.
func IsTimeout(ctx context.Context, err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded || (errors.As(err, &ne) && ne.Timeout())
}

// CleanErr drops the URL that *url.Error prints: its query may hold a
// secret.
func CleanErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// ErrAnswerTooLarge is an answer body longer than a client reads: a peer
// that answered what cannot be used (errdefs.ErrUnreachable).
var ErrAnswerTooLarge = errdefs.New(errdefs.ErrUnreachable, "the answer is larger than signagent reads")

// tooLarge is ErrAnswerTooLarge naming the limit.
func tooLarge(max int64) error {
	return fmt.Errorf("%w (%s)", ErrAnswerTooLarge, sizeText(max))
}

// ReadAnswer reads an answer's body whole when it is at most max bytes. A
// longer one is refused, not cut: it returns what it read up to max with
// an error wrapping ErrAnswerTooLarge, having read one byte past max to
// tell an answer of exactly max bytes from a longer one. A caller for
// whom the status says enough (a 5xx page) may still use those bytes.
func ReadAnswer(body io.Reader, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(body, max+1))
	if int64(len(data)) > max {
		return data[:max], tooLarge(max)
	}
	return data, err
}

// LimitBodies returns rt (nil: http.DefaultTransport) with every answer's
// body cut at max bytes: reading past it fails with ErrAnswerTooLarge. It
// bounds what libraries read whole on our behalf
// (go-oidc's key set, x/oauth2's token answers), whatever they do.
func LimitBodies(rt http.RoundTripper, max int64) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return limitTransport{rt, max}
}

type limitTransport struct {
	rt  http.RoundTripper
	max int64
}

func (l limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(req)
	if err == nil && resp.Body != nil {
		resp.Body = &limitedBody{rc: resp.Body, left: l.max, max: l.max}
	}
	return resp, err
}

type limitedBody struct {
	rc        io.ReadCloser
	left, max int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, tooLarge(b.max)
	}
	// One byte past the limit tells an answer of exactly max bytes from a
	// longer one.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n - 1, tooLarge(b.max)
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// Printable makes text a peer sent (an error body, a header, a provider's
// description, a caller's id) fit for one line of a log or an error: the
// secrets given are redacted, control and format characters (newlines,
// bidirectional overrides) become spaces, an HTML page is said to be one,
// and the result is at most max bytes, cut on a character boundary with an
// ellipsis.
func Printable(s string, max int, secrets ...string) string {
	s = strings.TrimSpace(s)
	for _, sec := range secrets {
		if len(sec) >= 4 {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	if l := strings.ToLower(s); strings.HasPrefix(l, "<!doctype") || strings.HasPrefix(l, "<html") {
		return "(an HTML page)"
	}
	s = strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD")))
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
