package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/trusted"
)

// Every kind has an answer: a kind added to errdefs without one would be
// a 500 here.
func TestEveryKindHasAnAnswer(t *testing.T) {
	for _, k := range errdefs.Kinds {
		if _, ok := kindAnswers[k]; !ok {
			t.Errorf("kind %q has no answer in kindAnswers", k)
		}
	}
	if len(kindAnswers) != len(errdefs.Kinds) {
		t.Errorf("kindAnswers has %d entries, errdefs %d kinds", len(kindAnswers), len(errdefs.Kinds))
	}
}

// The errors of each layer reach the caller with the status their kind
// says, and the service's code and step where there is one.
func TestClassify(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		status int
		code   string
		step   string
	}{
		{"bad credential", fmt.Errorf("phone: %w", canonical.ErrInvalidCredential), 400, agentapi.CodeBadInput, ""},
		{"bad JSON", errBadJSON, 400, agentapi.CodeBadInput, ""},
		{"trusted refusal", &trusted.ServiceError{Step: trusted.StepAuthenticate, Status: 403, Code: trusted.CodeUserNotFound}, 422, agentapi.CodeServiceRefused, "authenticate-by-truster"},
		{"trusted failing", &trusted.ServiceError{Step: trusted.StepApprove, Status: 503}, 502, agentapi.CodeServiceError, "approve-truster"},
		{"trusted reused signature", &trusted.ServiceError{Step: trusted.StepAuthenticate, Status: 409, Code: trusted.CodeSignatureReused}, 429, agentapi.CodeQueueFull, "authenticate-by-truster"},
		{"trusted timeout", &httpx.TransportError{Step: string(trusted.StepLink), Timeout: true, Err: context.DeadlineExceeded}, 504, agentapi.CodeServiceTimeout, "register-external-service-id"},
		{"trusted unreachable", &httpx.TransportError{Step: string(trusted.StepLink), Err: errors.New("refused")}, 502, agentapi.CodeServiceUnreachable, "register-external-service-id"},
		{"legacy refusal", &legacy.ServiceError{Call: "Authenticate (V3) type=password", Status: 401, Code: "Http.Auth"}, 422, agentapi.CodeServiceRefused, "Authenticate (V3) type=password"},
		{"legacy timeout", &httpx.TransportError{Step: "AuthenticateConfirm", Timeout: true, Err: context.DeadlineExceeded}, 504, agentapi.CodeServiceTimeout, "AuthenticateConfirm"},
		{"not a challenge", fmt.Errorf("challenge: %w", envelope.ErrMalformed), 502, agentapi.CodeServiceUnreachable, ""},
		{"sign in", fmt.Errorf("profile crm: %w", oidc.ErrSignIn), 409, agentapi.CodeSignInRequired, ""},
		{"provider refusal", &oidc.ProviderError{Step: "token (refresh_token)", Status: 400, Code: "invalid_client"}, 422, agentapi.CodeServiceRefused, "token (refresh_token)"},
		{"store down", fmt.Errorf("%w: dial", oidc.ErrStoreUnavailable), 503, agentapi.CodeStoreUnavailable, ""},
		{"queue full", tokenq.ErrQueueFull, 429, agentapi.CodeQueueFull, ""},
		{"token not ready", fmt.Errorf("%w: reconnecting", tokenq.ErrNotReady), 503, agentapi.CodeTokenNotReady, ""},
		{"PIN refused", &tokenerr.TokenError{Op: "log in", Kind: tokenerr.ErrPINIncorrect, Err: errors.New("CKR_PIN_INCORRECT")}, 503, agentapi.CodeTokenNotReady, ""},
		{"no API key", errNoAPIKey, 503, agentapi.CodeNotConfigured, ""},
		{"policy", errCertificateLoginOff, 403, agentapi.CodeForbidden, ""},
		{"body budget", proxy.ErrBusy, 503, agentapi.CodeBusy, ""},
		{"body too large", &http.MaxBytesError{Limit: 1}, 413, agentapi.CodeTooLarge, ""},
		{"deadline in the queue", tokenq.ErrExpired, 504, agentapi.CodeTokenTimeout, ""},
		{"anything else", errors.New("boom\nsecond line"), 500, agentapi.CodeInternal, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, e := classify(c.err)
			if status != c.status || e.Code != c.code || e.Step != c.step {
				t.Fatalf("classify = %d %s step %q, want %d %s step %q", status, e.Code, e.Step, c.status, c.code, c.step)
			}
			if e.Message == "" || e.Message == "boom\nsecond line" {
				t.Fatalf("message %q", e.Message)
			}
		})
	}
}

// The agent's answers name what an HTTP caller does (the API's routes and
// fields), not the CLI's commands and flags: a user not linked is told of
// POST /v1/links, not of signagent link.
func TestMessagesNameRoutes(t *testing.T) {
	for _, c := range []struct {
		code, want string
	}{
		{trusted.CodeUserNotFound, "link the user first (POST /v1/links)"},
		{trusted.CodeNotID, "give serviceUserId"},
	} {
		_, e := classify(&trusted.ServiceError{Step: trusted.StepAuthenticate, Status: 403, Code: c.code})
		if !strings.Contains(e.Message, c.want) || strings.Contains(e.Message, "signagent ") || strings.Contains(e.Message, "--") {
			t.Errorf("%s: message %q, want one naming %q and no command or flag", c.code, e.Message, c.want)
		}
	}
}
