package oidc

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrInvalidInput is wrapped by errors about what the caller passed in.
	ErrInvalidInput = errors.New("invalid input")
	// ErrDenied: the user or the provider did not grant access
	// (access_denied).
	ErrDenied = errors.New("access was not granted")
	// ErrExpired: the device code expired before the user approved it
	// (expired_token).
	ErrExpired = errors.New("the device code expired before the sign-in was approved")
	// ErrSignIn: there are no usable tokens for the profile (never signed
	// in, signed out, or the refresh token was refused); sign in again.
	ErrSignIn = errors.New("sign-in needed")
	// ErrIDToken: the provider's id_token failed a check.
	ErrIDToken = errors.New("the identity provider's id_token was rejected")
	// ErrState: the redirect's state is not the one sent.
	ErrState = errors.New("the redirect's state does not match this sign-in")
	// ErrStore: the token store cannot be used as it is.
	ErrStore = errors.New("token store")
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

func (e *ProviderError) Error() string {
	msg := fmt.Sprintf("%s: the identity provider answered", e.Step)
	if e.Status != 0 {
		msg += fmt.Sprintf(" HTTP %d", e.Status)
	}
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Description != "" {
		msg += ": " + e.Description
	}
	if h := e.hint(); h != "" {
		msg += "; " + h
	}
	return msg
}

func (e *ProviderError) hint() string {
	switch e.Code {
	case "invalid_client":
		return "the client_id or client secret is wrong (check --client-id and SIGNAGENT_CLIENT_SECRET / --client-secret-file)"
	case "access_denied":
		return "the user (or the provider) did not grant access"
	case "expired_token":
		return "the user did not approve in time; run signagent login again"
	case "invalid_scope":
		return "the client may not ask for this scope (check --space and --scope)"
	}
	return ""
}

func (e *ProviderError) Unwrap() error { return e.kind }

// TransportError is a provider that could not be reached, did not answer
// in time, failed (5xx) or answered something that is not OAuth (an HTML
// page).
type TransportError struct {
	Step string
	URL  string
	Msg  string
	Err  error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("%s: the identity provider at %s %s", e.Step, e.URL, e.Msg)
}

func (e *TransportError) Unwrap() error { return e.Err }

// printable keeps what a provider sent short, on one line and printable.
func printable(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}
