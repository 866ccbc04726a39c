package oidc

import (
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

var (
	// ErrDenied: the user or the provider did not grant access
	// (access_denied).
	ErrDenied = errdefs.New(errdefs.ErrRefused, "access was not granted")
	// ErrExpired: the device code expired before the user approved it
	// (expired_token).
	ErrExpired = errdefs.New(errdefs.ErrSignIn, "the device code expired before the sign-in was approved")
	// ErrSignIn: there are no usable tokens for the profile (never signed
	// in, signed out, or the refresh token was refused); sign in again.
	ErrSignIn = errdefs.New(errdefs.ErrSignIn, "sign-in needed")
	// ErrIDToken: the provider's id_token failed a check.
	ErrIDToken = errdefs.New(errdefs.ErrUnreachable, "the identity provider's id_token was rejected")
	// ErrState: the redirect's state is not the one sent.
	ErrState = errdefs.New(errdefs.ErrInvalidInput, "the redirect's state does not match this sign-in")
	// ErrStore: the token store cannot be used as it is.
	ErrStore = errdefs.New(errdefs.ErrNotConfigured, "token store")
)

// ProviderError is a refusal from the identity provider: an OAuth error
// code, or a 4xx without one.
type ProviderError struct {
	Step        string // "device authorization", "token (refresh_token)", ...
	Status      int
	Code        string // invalid_client, invalid_grant, ...
	Description string // one line, printable
	kind        error  // ErrDenied, ErrExpired, ErrSignIn or nil
}

// Error is the step, the status and the provider's answer on one line,
// with a hint where one is known.
func (e *ProviderError) Error() string {
	return httpx.AnswerLine(e.Step, idp, e.Status, e.Code, e.Description, e.hint())
}

func (e *ProviderError) hint() string {
	switch e.Code {
	case "invalid_client":
		return "the client_id or client secret is wrong (check --client-id and SIGNAGENT_CLIENT_SECRET / --client-secret-file)"
	case "access_denied":
		return "the user (or the provider) did not grant access"
	case "expired_token":
		return "the user did not approve in time; run signagent oidc login again"
	case "invalid_scope":
		return "the client may not ask for this scope (check --space and --scope)"
	}
	return ""
}

// Unwrap is the error's kind (sign in again, refused, failing, ...).
func (e *ProviderError) Unwrap() error { return e.kind }

// Is gives a provider's refusal its kind, errdefs.ErrRefused (a refusal
// that means signing in again also matches ErrSignIn, through Unwrap).
func (e *ProviderError) Is(target error) bool { return target == errdefs.ErrRefused }

// Detail returns the provider's error code and the step, for an API answer.
func (e *ProviderError) Detail() (code, step string) { return e.Code, e.Step }

// idp is who an OpenID Connect transport error names (httpx.TransportError's Peer).
const idp = "the identity provider"
