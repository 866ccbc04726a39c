// Package httpx holds what the service clients (trusted, legacy) share:
// the base-address check, an HTTP client that never follows a redirect,
// jittered backoff, and error clean-up.
package httpx

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
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

// Client returns a copy of c (nil: one with sensible transport time-outs)
// that never follows a redirect: a redirect would carry the request's
// secrets (API key, developer key) somewhere else.
func Client(c *http.Client) *http.Client {
	if c == nil {
		c = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   16,
			ForceAttemptHTTP2:     true,
		}}
	}
	cp := *c
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// Backoff waits before retry n (1-based): a random time up to base*2^(n-1)
// (full jitter), or until ctx is done.
func Backoff(ctx context.Context, base time.Duration, n int) error {
	ceiling := base << (n - 1)
	d := ceiling / 2
	if j, err := rand.Int(rand.Reader, big.NewInt(int64(ceiling)+1)); err == nil {
		d = time.Duration(j.Int64())
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
