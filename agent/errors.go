package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/signagent/signagent/api"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/service"
	"github.com/signagent/signagent/trusted"
)

// APIError is the body of an error answer.
type APIError = api.Error

// The agent's error codes, from package api.
const (
	CodeBadInput           = api.CodeBadInput
	CodeUnauthorized       = api.CodeUnauthorized
	CodeForbidden          = api.CodeForbidden
	CodeNotFound           = api.CodeNotFound
	CodeMethodNotAllowed   = api.CodeMethodNotAllowed
	CodeTooLarge           = api.CodeTooLarge
	CodeQueueFull          = api.CodeQueueFull
	CodeSignInRequired     = api.CodeSignInRequired
	CodeTokenNotReady      = api.CodeTokenNotReady
	CodeTokenTimeout       = api.CodeTokenTimeout
	CodeServiceRefused     = api.CodeServiceRefused
	CodeServiceError       = api.CodeServiceError
	CodeServiceUnreachable = api.CodeServiceUnreachable
	CodeServiceTimeout     = api.CodeServiceTimeout
	CodeNotConfigured      = api.CodeNotConfigured
	CodeBusy               = api.CodeBusy
	CodeStoreUnavailable   = api.CodeStoreUnavailable
	CodeInternal           = api.CodeInternal
)

// errNotConfigured is returned by session and link calls when no service
// base URL is configured.
var errNotConfigured = errors.New("no service base URL is configured (--base-url)")

// errNoToken is returned by what needs the token (signatures, sessions,
// certificate logins) in an agent configured without one.
var errNoToken = errors.New("this agent has no token: it was started for OpenID Connect or legacy passwords alone (signing needs the partner API key and a token: --api-key-file, --module or --key)")

// errNoAPIKey is returned by signature calls when no API key is configured.
var errNoAPIKey = errors.New("no partner API key is configured (SIGNAGENT_API_KEY or --api-key-file)")

// classify maps an error to its HTTP status and body.
func classify(err error) (int, APIError) {
	var se *trusted.ServiceError
	var te *trusted.TransportError
	var mbe *http.MaxBytesError
	var lse *legacy.ServiceError
	var lte *legacy.TransportError
	var ste *service.TransportError
	switch {
	case errors.Is(err, errLegacyHeaderHidden), errors.Is(err, errCertificateLoginOff):
		return http.StatusForbidden, APIError{Code: CodeForbidden, Message: err.Error()}
	case errors.Is(err, errBodyBudget):
		return http.StatusServiceUnavailable, APIError{Code: CodeBusy, Message: err.Error()}
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, APIError{Code: CodeTooLarge, Message: err.Error()}
	case isOIDC(err):
		return classifyOIDC(err)
	case errors.Is(err, canonical.ErrInvalidCredential), errors.Is(err, canonical.ErrInvalidTimestamp),
		errors.Is(err, trusted.ErrInvalidInput), errors.Is(err, errBadJSON), errors.Is(err, legacy.ErrInvalidInput),
		errors.Is(err, service.ErrInvalidInput):
		return http.StatusBadRequest, APIError{Code: CodeBadInput, Message: err.Error()}
	case errors.Is(err, ErrQueueFull):
		return http.StatusTooManyRequests, APIError{Code: CodeQueueFull, Message: "the token is busy and its queue is full; retry after a moment"}
	case errors.Is(err, trusted.ErrTooSoon):
		return http.StatusTooManyRequests, APIError{Code: CodeQueueFull, Message: err.Error()}
	case errors.Is(err, ErrTokenNotReady), pkcs11.Recoverable(err),
		errors.Is(err, pkcs11.ErrPINIncorrect), errors.Is(err, pkcs11.ErrPINLocked), errors.Is(err, pkcs11.ErrPINMissing):
		return http.StatusServiceUnavailable, APIError{Code: CodeTokenNotReady, Message: err.Error()}
	case errors.As(err, &se) && se.Temporary():
		return http.StatusBadGateway, APIError{Code: CodeServiceError, Message: se.Error(), ServiceCode: se.Code, Step: string(se.Step)}
	case errors.As(err, &se):
		return http.StatusUnprocessableEntity, APIError{Code: CodeServiceRefused, Message: se.Error(), ServiceCode: se.Code, Step: string(se.Step)}
	case errors.As(err, &te) && te.Timeout:
		return http.StatusGatewayTimeout, APIError{Code: CodeServiceTimeout, Message: te.Error(), Step: string(te.Step)}
	case errors.As(err, &te):
		return http.StatusBadGateway, APIError{Code: CodeServiceUnreachable, Message: te.Error(), Step: string(te.Step)}
	case errors.As(err, &lse) && lse.Temporary():
		return http.StatusBadGateway, APIError{Code: CodeServiceError, Message: lse.Error(), ServiceCode: lse.Code, Step: lse.Call}
	case errors.As(err, &lse):
		return http.StatusUnprocessableEntity, APIError{Code: CodeServiceRefused, Message: lse.Error(), ServiceCode: lse.Code, Step: lse.Call}
	case errors.As(err, &lte) && lte.Timeout:
		return http.StatusGatewayTimeout, APIError{Code: CodeServiceTimeout, Message: lte.Error(), Step: lte.Call}
	case errors.As(err, &lte), errors.Is(err, envelope.ErrNotChallenge):
		return http.StatusBadGateway, APIError{Code: CodeServiceUnreachable, Message: err.Error()}
	case errors.As(err, &ste) && errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, APIError{Code: CodeServiceTimeout, Message: ste.Error()}
	case errors.As(err, &ste):
		return http.StatusBadGateway, APIError{Code: CodeServiceUnreachable, Message: ste.Error()}
	case errors.Is(err, errNoAPI), errors.Is(err, errNotConfigured), errors.Is(err, errNoAPIKey), errors.Is(err, errNoToken), errors.Is(err, errLegacyNotConfigured), errors.Is(err, errOIDCNotConfigured),
		errors.Is(err, pkcs11.ErrKeyUsage), errors.Is(err, envelope.ErrUnsupported):
		return http.StatusServiceUnavailable, APIError{Code: CodeNotConfigured, Message: err.Error()}
	case errors.Is(err, errExpired), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, APIError{Code: CodeTokenTimeout, Message: "the request's deadline passed before the token signed"}
	}
	return http.StatusInternalServerError, APIError{Code: CodeInternal, Message: firstLine(err.Error())}
}

func isOIDC(err error) bool {
	var pe *oidc.ProviderError
	var te *oidc.TransportError
	return errors.As(err, &pe) || errors.As(err, &te) || errors.Is(err, oidc.ErrSignIn) || errors.Is(err, oidc.ErrStore) || errors.Is(err, oidc.ErrStoreUnavailable) ||
		errors.Is(err, oidc.ErrIDToken) || errors.Is(err, oidc.ErrInvalidInput) || errors.Is(err, oidc.ErrExpired)
}

// classifyOIDC: a profile that must sign in again (or whose store an
// operator must fix) is 409 naming signagent login; the provider's
// refusals 422, its failures 502/504; a bad profile name 400; what the
// agent lacks to refresh 503.
func classifyOIDC(err error) (int, APIError) {
	var pe *oidc.ProviderError
	var te *oidc.TransportError
	switch {
	case errors.Is(err, oidc.ErrSignIn), errors.Is(err, oidc.ErrStore), errors.Is(err, oidc.ErrExpired):
		return http.StatusConflict, APIError{Code: CodeSignInRequired, Message: err.Error()}
	case errors.Is(err, ErrOIDCSecret):
		return http.StatusServiceUnavailable, APIError{Code: CodeNotConfigured, Message: err.Error()}
	case errors.Is(err, oidc.ErrStoreUnavailable):
		// No refresh without the store: a refresh token used by two
		// agents would sign the user out everywhere.
		w := http.StatusServiceUnavailable
		return w, APIError{Code: CodeStoreUnavailable, Message: err.Error() + "; the access token needs a refresh, which waits for the store"}
	case errors.As(err, &pe):
		return http.StatusUnprocessableEntity, APIError{Code: CodeServiceRefused, Message: err.Error(), ServiceCode: pe.Code, Step: pe.Step}
	case errors.As(err, &te) && errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, APIError{Code: CodeServiceTimeout, Message: err.Error(), Step: te.Step}
	case errors.As(err, &te), errors.Is(err, oidc.ErrIDToken):
		return http.StatusBadGateway, APIError{Code: CodeServiceUnreachable, Message: err.Error()}
	}
	return http.StatusBadRequest, APIError{Code: CodeBadInput, Message: err.Error()}
}

// ErrOIDCSecret is what the agent answers when a profile needs a refresh
// and the agent was given no client secret.
var ErrOIDCSecret = errors.New("the agent has no OpenID Connect client secret (SIGNAGENT_CLIENT_SECRET or --client-secret-file), so it cannot refresh tokens")

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
		w.Header().Set("Retry-After", "1")
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="signagent"`)
	}
	writeJSON(w, status, api.ErrorBody{Error: e})
}
