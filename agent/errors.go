package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/errdefs"
)

// APIError is the body of an error answer.
type APIError = agentapi.Error

// errNotConfigured is returned by session and link calls when no service
// base URL is configured.
var errNotConfigured = errdefs.New(errdefs.ErrNotConfigured, "no service base URL is configured (--trusted-url)")

// errNoAPIKey is returned by signature calls when no API key is configured.
var errNoAPIKey = errdefs.New(errdefs.ErrNotConfigured, "no partner API key is configured (SIGNAGENT_API_KEY or --api-key-file)")

// kindAnswers is the one table from an error's kind to the agent's answer.
var kindAnswers = map[error]struct {
	status int
	code   string
}{
	errdefs.ErrForbidden:        {http.StatusForbidden, agentapi.CodeForbidden},
	errdefs.ErrSignIn:           {http.StatusConflict, agentapi.CodeSignInRequired},
	errdefs.ErrStoreUnavailable: {http.StatusServiceUnavailable, agentapi.CodeStoreUnavailable},
	errdefs.ErrStoreFormatNewer: {http.StatusServiceUnavailable, agentapi.CodeStoreFormatNewer},
	errdefs.ErrTokenNotReady:    {http.StatusServiceUnavailable, agentapi.CodeTokenNotReady},
	errdefs.ErrTryAgain:         {http.StatusTooManyRequests, agentapi.CodeQueueFull},
	errdefs.ErrBackoff:          {http.StatusTooManyRequests, agentapi.CodeLoginBackoff},
	errdefs.ErrInvalidInput:     {http.StatusBadRequest, agentapi.CodeBadInput},
	errdefs.ErrNotConfigured:    {http.StatusServiceUnavailable, agentapi.CodeNotConfigured},
	errdefs.ErrTimeout:          {http.StatusGatewayTimeout, agentapi.CodeServiceTimeout},
	errdefs.ErrUnreachable:      {http.StatusBadGateway, agentapi.CodeServiceUnreachable},
	errdefs.ErrFailing:          {http.StatusBadGateway, agentapi.CodeServiceError},
	errdefs.ErrRefused:          {http.StatusUnprocessableEntity, agentapi.CodeServiceRefused},
}

// classify maps an error to its HTTP status and body: the agent's own
// limits first (a body too large, the body budget spent), then the error's
// kind through kindAnswers, then a deadline that passed while the request
// waited for the token. Anything else is an internal error.
func classify(err error) (int, APIError) {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, proxy.ErrBusy):
		return http.StatusServiceUnavailable, APIError{Code: agentapi.CodeBusy, Message: err.Error()}
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, APIError{Code: agentapi.CodeTooLarge, Message: err.Error()}
	}
	if a, ok := kindAnswers[errdefs.Kind(err)]; ok {
		e := APIError{Code: a.code, Message: forHTTP.Replace(err.Error())}
		var d interface{ Detail() (code, step string) }
		if errors.As(err, &d) {
			e.ServiceCode, e.Step = d.Detail()
		}
		return a.status, e
	}
	if errors.Is(err, tokenq.ErrExpired) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout, APIError{Code: agentapi.CodeTokenTimeout, Message: "the request's deadline passed before the token signed"}
	}
	return http.StatusInternalServerError, APIError{Code: agentapi.CodeInternal, Message: firstLine(err.Error())}
}

// forHTTP puts, in the messages the agent answers, the HTTP route a caller
// uses where the scheme packages name the command an operator types (the
// same advice, in the caller's terms; the API document's names).
var forHTTP = strings.NewReplacer(
	"(signagent trusted link)", "(POST /v1/links)",
	"pass --service-user-id", "give serviceUserId",
)

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, e APIError) {
	switch status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		if w.Header().Get("Retry-After") == "" { // retryAfter's, when the error said how long
			w.Header().Set("Retry-After", "1")
		}
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="signagent"`)
	}
	writeJSON(w, status, agentapi.ErrorBody{Error: e})
}

// retryAfter sets Retry-After from an error that says how long to wait (a
// certificate login's wait after a failure), in whole seconds rounded up.
func retryAfter(w http.ResponseWriter, err error) {
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) && ra.RetryAfter() > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((ra.RetryAfter()+time.Second-1)/time.Second)))
	}
}
