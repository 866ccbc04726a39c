package legacy

import (
	"net/http"
	"strings"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// ErrorCodeHeader is the response header that carries the service's error
// code; the body is plain text.
const ErrorCodeHeader = "X-Service-ErrorCode"

// Error codes the wire notes show.
const (
	CodeAuth             = "Http.Auth"
	CodeRndBytesNotFound = "Auth.RndBytesNotFound"
)

var (
	// ErrDeveloperKey is wrapped by errors about the developer key given.
	ErrDeveloperKey = errdefs.New(errdefs.ErrNotConfigured, "developer key")
)

// ServiceError is a non-2xx answer.
type ServiceError struct {
	Call    string // "Authenticate (V3) type=password", "AuthenticateConfirm"
	Status  int
	Code    string // X-Service-ErrorCode, "" when absent
	Message string // the body's text, one line, secrets scrubbed
	// RetryAfter is the wait the service asked for (Retry-After), 0 when
	// it asked for none.
	RetryAfter time.Duration
}

// Error is the call, the status and the service's answer on one line,
// with a hint where one is known.
func (e *ServiceError) Error() string {
	return httpx.AnswerLine(e.Call, "the service", e.Status, e.Code, e.Message, e.hint())
}

func (e *ServiceError) hint() string {
	switch {
	case e.Status == 401 && (e.Code == CodeAuth || strings.Contains(strings.ToLower(e.Message), "api client id")):
		return "the developer key is missing or wrong: check SIGNAGENT_DEVELOPER_KEY or --developer-key-file"
	case e.Status == 403 && e.Code == CodeRndBytesNotFound:
		return "the service holds no challenge for this certificate (never issued, already used, expired, or replaced by a newer login): log in again"
	case e.Status >= 500:
		return "the service failed; try again later"
	case e.Status == http.StatusTooManyRequests:
		return "the service is limiting requests; try again later"
	}
	return ""
}

// Temporary reports whether trying again later may help (5xx, and 429:
// too many requests).
func (e *ServiceError) Temporary() bool {
	return httpx.Failing(e.Status)
}

// Is gives the error its kind: the service failing or limiting requests
// (errdefs.ErrFailing), else a refusal (errdefs.ErrRefused).
func (e *ServiceError) Is(target error) bool {
	if e.Temporary() {
		return target == errdefs.ErrFailing
	}
	return target == errdefs.ErrRefused
}

// Detail returns the service's error code and the call, for an API answer.
func (e *ServiceError) Detail() (code, step string) { return e.Code, e.Call }
