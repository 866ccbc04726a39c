package httpx

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Settings are a service client's transport settings, embedded in its
// Config (trusted, legacy); New calls Fill, which gives each its default.
type Settings struct {
	// HTTPClient defaults to one with sensible transport time-outs that
	// never follows a redirect.
	HTTPClient *http.Client
	Timeout    time.Duration // one attempt (default 15s)
	// Attempts is how many times a request is tried that may be tried
	// again (default 3).
	Attempts int
	// Backoff is the first retry's base delay (default 200ms), doubled
	// each time, with full jitter.
	Backoff   time.Duration
	UserAgent string           // default "signagent"
	Now       func() time.Time // default time.Now
}

// Fill sets the defaults of what is not given; the HTTP client never
// follows a redirect (Client).
func (s *Settings) Fill() {
	s.HTTPClient = Client(s.HTTPClient)
	if s.Timeout <= 0 {
		s.Timeout = 15 * time.Second
	}
	if s.Attempts <= 0 {
		s.Attempts = 3
	}
	if s.Backoff <= 0 {
		s.Backoff = 200 * time.Millisecond
	}
	if s.UserAgent == "" {
		s.UserAgent = "signagent"
	}
	if s.Now == nil {
		s.Now = time.Now
	}
}

// Retry runs op until it succeeds, op says its error is not worth another
// try, ctx ends or attempts are spent. Between attempts it waits the
// backoff, or what the service asked (op's retryAfter) when longer,
// unless the wait would outlast ctx; retrying is told each attempt that
// failed and the wait before the next, so that it is logged only when
// another attempt follows. The error is op's last.
func Retry(ctx context.Context, attempts int, backoff time.Duration, retrying func(attempt int, wait time.Duration, err error),
	op func(attempt int) (retry bool, retryAfter time.Duration, err error)) error {
	for attempt := 1; ; attempt++ {
		retry, asked, err := op(attempt)
		if err == nil {
			return nil
		}
		if !retry || ctx.Err() != nil || attempt >= attempts {
			return err
		}
		d := RetryDelay(backoff, attempt, asked)
		if werr := CheckWait(ctx, d); werr != nil {
			return fmt.Errorf("%w; %w", err, werr)
		}
		retrying(attempt, d, err)
		if Wait(ctx, d) != nil {
			return err
		}
	}
}
