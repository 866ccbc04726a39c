package httpx

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/errdefs"
)

func TestBackoffDelayIsCapped(t *testing.T) {
	for _, n := range []int{1, 5, 10, 31, 32, 63, 64, 1000} {
		for range 50 {
			d := BackoffDelay(time.Second, n)
			if d < 0 || d > MaxBackoff {
				t.Fatalf("retry %d: %v (cap %v)", n, d, MaxBackoff)
			}
		}
	}
	// The first retries still grow from the base.
	for range 50 {
		if d := BackoffDelay(100*time.Millisecond, 1); d > 100*time.Millisecond {
			t.Fatalf("retry 1 of a 100ms base waited %v", d)
		}
	}
	if d := BackoffDelay(0, 3); d != 0 {
		t.Fatalf("no base: %v", d)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	for v, want := range map[string]struct {
		d  time.Duration
		ok bool
	}{
		"":                              {0, false},
		"3":                             {3 * time.Second, true},
		" 0 ":                           {0, true},
		"99999999999999999999999":       {0, false}, // overflows uint64: not a number
		"86400":                         {MaxRetryAfter, true},
		"Wed, 25 Nov 2026 10:00:07 GMT": {7 * time.Second, true},
		"Wed, 25 Nov 2026 09:00:00 GMT": {0, true},
		"Wed, 25 Nov 2099 10:00:00 GMT": {MaxRetryAfter, true},
		"-5":                            {0, false},
		"soon":                          {0, false},
		"1.5":                           {0, false},
	} {
		h := http.Header{}
		if v != "" {
			h.Set("Retry-After", v)
		}
		d, ok := RetryAfter(h, now)
		if d != want.d || ok != want.ok {
			t.Errorf("Retry-After %q: %v %v, want %v %v", v, d, ok, want.d, want.ok)
		}
	}
}

func TestWaitPastDeadlineEndsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// ErrNoTimeLeft is returned before any sleep.
	if err := Wait(ctx, time.Minute); !errors.Is(err, ErrNoTimeLeft) {
		t.Fatalf("err = %v", err)
	}
	if err := Wait(ctx, time.Millisecond); err != nil {
		t.Fatalf("a short wait: %v", err)
	}
	if d := RetryDelay(time.Second, 1, 3*time.Second); d != 3*time.Second {
		t.Fatalf("asked 3s, got %v", d)
	}
	if d := RetryDelay(time.Second, 40, 0); d > MaxBackoff {
		t.Fatalf("no Retry-After: %v", d)
	}
}

type bodyTransport string

func (b bodyTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(string(b)))}, nil
}

func TestLimitBodies(t *testing.T) {
	for body, ok := range map[string]bool{"": true, "12345": true, "123456": false, strings.Repeat("x", 100000): false} {
		c := &http.Client{Transport: LimitBodies(bodyTransport(body), 5)}
		resp, err := c.Get("http://example.invalid/")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if ok != (err == nil) || (ok && string(got) != body) || (!ok && (!errors.Is(err, ErrAnswerTooLarge) || len(got) > 5)) {
			t.Errorf("%d bytes: read %d, %v", len(body), len(got), err)
		}
	}
}

func TestPrintable(t *testing.T) {
	cases := []struct {
		name, in string
		max      int
		secrets  []string
		want     string
	}{
		{"plain", "  invalid_grant ", 40, nil, "invalid_grant"},
		{"lines and controls", "first\nsecond\r\x1b[31mred\x00", 80, nil, "first second  [31mred"},
		{"bidi override", "abc\u202edef", 80, nil, "abc def"},
		{"secret", "bad key testClient-123 here", 80, []string{"testClient-123", "ab"}, "bad key [redacted] here"},
		{"html", "<!DOCTYPE html><p>oops", 80, nil, "(an HTML page)"},
		{"cut on a character", "ééééé", 5, nil, "éé…"},
		{"invalid UTF-8", "a\xffb", 80, nil, "a\uFFFDb"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Printable(c.in, c.max, c.secrets...); got != c.want {
				t.Fatalf("Printable(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// Retry tries again while op says so, up to the attempts, tells retrying
// of each attempt followed by another, and stops at once on an error op
// says is final or when the wait would outlast the context.
func TestRetry(t *testing.T) {
	fail := errors.New("fail")
	var calls, told int
	err := Retry(context.Background(), 3, time.Millisecond, func(int, time.Duration, error) { told++ },
		func(int) (bool, time.Duration, error) { calls++; return true, 0, fail })
	if !errors.Is(err, fail) || calls != 3 || told != 2 {
		t.Fatalf("err %v after %d calls, %d told", err, calls, told)
	}
	calls, told = 0, 0
	err = Retry(context.Background(), 3, time.Millisecond, func(int, time.Duration, error) { told++ },
		func(n int) (bool, time.Duration, error) {
			calls++
			if n == 2 {
				return false, 0, nil
			}
			return true, 0, fail
		})
	if err != nil || calls != 2 || told != 1 {
		t.Fatalf("err %v after %d calls, %d told", err, calls, told)
	}
	calls = 0
	err = Retry(context.Background(), 3, time.Millisecond, func(int, time.Duration, error) {},
		func(int) (bool, time.Duration, error) { calls++; return false, 0, fail })
	if !errors.Is(err, fail) || calls != 1 {
		t.Fatalf("a final error: %v after %d calls", err, calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	calls = 0
	err = Retry(ctx, 3, time.Millisecond, func(int, time.Duration, error) {},
		func(int) (bool, time.Duration, error) { calls++; return true, time.Hour, fail })
	if !errors.Is(err, fail) || calls != 1 {
		t.Fatalf("a Retry-After past the deadline: %v after %d calls", err, calls)
	}
}

// ReadAnswer reads an answer up to its limit and refuses a longer one in
// one line, having read one byte past the limit, never cutting it
// silently.
func TestReadAnswer(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{{"", true}, {"12345", true}, {"123456", false}, {strings.Repeat("x", 100000), false}} {
		r := strings.NewReader(tc.body)
		got, err := ReadAnswer(r, 5)
		if tc.ok {
			if err != nil || string(got) != tc.body {
				t.Errorf("%d bytes: %q, %v", len(tc.body), got, err)
			}
			continue
		}
		if !errors.Is(err, ErrAnswerTooLarge) || !errors.Is(err, errdefs.ErrUnreachable) || len(got) > 5 ||
			err.Error() != "the answer is larger than signagent reads (5 bytes)" {
			t.Errorf("%d bytes: read %d, %v", len(tc.body), len(got), err)
		}
		if read := len(tc.body) - r.Len(); read > 6 {
			t.Errorf("%d bytes: %d read for a limit of 5", len(tc.body), read)
		}
	}
	for max, want := range map[int64]string{64 << 10: "64 KiB", 1 << 20: "1 MiB", 64 << 20: "64 MiB", 1000: "1000 bytes"} {
		_, err := ReadAnswer(strings.NewReader(strings.Repeat("x", int(max)+1)), max)
		if err == nil || !strings.HasSuffix(err.Error(), "("+want+")") {
			t.Errorf("limit %d: %v", max, err)
		}
	}
}
