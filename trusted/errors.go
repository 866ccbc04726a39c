package trusted

import (
	"fmt"
	"net/http"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// Step names a call of the trusted-authentication flow.
type Step string

// The three steps, by their path names.
const (
	StepLink         Step = "register-external-service-id"
	StepAuthenticate Step = "authenticate-by-truster"
	StepApprove      Step = "approve-truster"
)

// Error codes the service returns in {"Code": ...} bodies (section 7.3).
const (
	CodeForbiddenForTargetUser = "ForbiddenForTargetUser"
	CodeInvalidAPIKey          = "InvalidApiKey"
	CodeNotID                  = "NotId"
	CodeUserNotFound           = "UserNotFound"
	CodeUserNotUniq            = "UserNotUniq"
	CodeUnknownError           = "UnknownError"
	// CodeSignatureReused is the answer to a step-1 signature the service
	// has seen before (the emulator's code): the client signs again with a
	// later timestamp.
	CodeSignatureReused = "SignatureReused"
	// CodeStaleTimestamp is the answer to a step-1 timestamp too far from
	// the service's clock (the emulator's code): this machine's clock is
	// off, and the error says by how much (ServiceError.Skew).
	CodeStaleTimestamp = "StaleTimestamp"
	// CodeInvalidKey and CodeKeyExpired are step 2's answers to a Key the
	// service no longer holds (the emulator's codes): used already, or
	// expired. Session then starts again from step 1, once.
	CodeInvalidKey = "InvalidKey"
	CodeKeyExpired = "KeyExpired"
)

// explanations say, for each code, what an operator can do about it.
var explanations = map[string]string{
	CodeForbiddenForTargetUser: "the target user is an administrator of the organization, and signing in as an administrator this way is forbidden; use a non-administrator account",
	CodeInvalidAPIKey:          "the service does not accept this API key (or the key lacks the permission this call needs); check the key file and ask the service's support which permissions the key carries",
	CodeNotID:                  "no trusted-system user identifier was given; pass --service-user-id",
	CodeUserNotFound:           "no user of the service matches this credential, or the user is not linked to this trusted-system id; check the credential or link the user first (signagent trusted link)",
	CodeUserNotUniq:            "more than one user of the service matches this credential; identify the user by another credential (SNILS or certificate thumbprint)",
	CodeUnknownError:           "the service failed without saying why; try again later, and contact the service's support if it persists",
	CodeSignatureReused:        "the service refused a signature it had already seen: another process signed the same text (this API key and credential, the same second) a moment ago; try again after a second",
}

// Explain returns the operator's sentence for a service error code, or "" for
// a code it does not know.
func Explain(code string) string { return explanations[code] }

// ServiceError is a non-2xx answer from the service.
type ServiceError struct {
	Step   Step
	Status int    // HTTP status
	Code   string // the service's error code, "" when the body had none
	URL    string // the request URL with secret parameters masked
	// RetryAfter is the wait the service asked for (Retry-After), 0 when
	// it asked for none.
	RetryAfter time.Duration
	// Skew is how far the service's clock (its answer's Date) is ahead of
	// this machine's, negative when behind; HasSkew says whether the
	// answer carried a Date to measure it from.
	Skew    time.Duration
	HasSkew bool
}

// Error says the step, the status and the service's answer.
func (e *ServiceError) Error() string {
	msg := fmt.Sprintf("%s: the service answered HTTP %d", e.Step, e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Code == CodeStaleTimestamp {
		return msg + ": " + e.clock()
	}
	if x := Explain(e.Code); x != "" {
		msg += ": " + x
	} else {
		switch {
		case e.Status == 400:
			msg += " (bad request: a required parameter is missing or malformed)"
		case e.Status == 401:
			msg += " (no API key reached the service)"
		case e.Status >= 500:
			msg += " (the service failed; try again later)"
		case e.Status == http.StatusTooManyRequests:
			msg += " (the service is limiting requests; try again later)"
		}
	}
	return msg
}

// clock says a stale timestamp as the clock problem it is, with the skew
// the answer's Date measured.
func (e *ServiceError) clock() string {
	if !e.HasSkew {
		return "the service found the signed timestamp too far from its clock, and its answer had no Date to measure by how much; check this machine's clock (timedatectl status)"
	}
	return "the service found the signed timestamp too far from its clock: " + httpx.DescribeSkew(e.Skew, "the service") +
		"; set it right (timedatectl set-ntp true, or chronyc makestep)"
}

// Temporary reports whether trying again later may help: the service's
// own failure (5xx) or its limit on requests (429).
func (e *ServiceError) Temporary() bool {
	return httpx.Failing(e.Status)
}

// Reused reports whether the service refused a signature it had already
// seen: nothing is wrong, and the same call a second later succeeds.
func (e *ServiceError) Reused() bool { return e.Code == CodeSignatureReused }

// KeyLost reports whether step 2 was refused because the service no
// longer holds step 1's Key: another process used it (two processes that
// sign the same text in the same second are handed the same Key, and the
// first to confirm it spends it) or it expired.
func (e *ServiceError) KeyLost() bool {
	return e.Step == StepApprove && (e.Code == CodeInvalidKey || e.Code == CodeKeyExpired)
}

// Is gives the error its kind: the service failing or limiting requests
// (errdefs.ErrFailing), a signed text it saw a moment ago
// (errdefs.ErrTryAgain), else a refusal (errdefs.ErrRefused).
func (e *ServiceError) Is(target error) bool {
	switch {
	case e.Temporary():
		return target == errdefs.ErrFailing
	case e.Reused():
		return target == errdefs.ErrTryAgain
	}
	return target == errdefs.ErrRefused
}

// Detail returns the service's error code and the step, for an API answer.
func (e *ServiceError) Detail() (code, step string) { return e.Code, string(e.Step) }
