package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/service"
	"github.com/signagent/signagent/trusted"
)

// Every kind has an exit status of its own choosing: a kind added to
// errdefs without one would exit 1.
func TestEveryKindHasAnExitCode(t *testing.T) {
	for _, k := range errdefs.Kinds {
		if _, ok := exitCodes[k]; !ok {
			t.Errorf("kind %q has no exit code", k)
		}
	}
}

func TestExitCode(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"usage", usageErr(errors.New("--x")), exitBadInput},
		{"bad credential", fmt.Errorf("sign: %w", canonical.ErrInvalidCredential), exitBadInput},
		{"no PIN", pkcs11.ErrPINMissing, exitBadInput},
		{"PIN refused", &pkcs11.TokenError{Op: "log in", Kind: pkcs11.ErrPINIncorrect, Err: errors.New("x")}, exitFailure},
		{"refused", &trusted.ServiceError{Status: 403, Code: trusted.CodeUserNotFound}, exitRefused},
		{"refused twice", &authz.RefusedError{Identity: "oidc crm", Status: 401}, exitRefused},
		{"failing", &trusted.ServiceError{Status: 500}, exitTransport},
		{"reused", &trusted.ServiceError{Status: 409, Code: trusted.CodeSignatureReused}, exitRetry},
		{"business 429", &service.Error{Method: "/GetMyOrganizations", Status: 429}, exitTransport},
		{"business 403", &service.Error{Method: "/GetMyEmployee", Status: 403}, exitRefused},
		{"sign in", oidc.ErrSignIn, exitSignIn},
		{"store down", oidc.ErrStoreUnavailable, exitTransport},
		{"no kind", errors.New("boom"), exitFailure},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := exitCode(c.err); got != c.want {
				t.Fatalf("exitCode(%v) = %d, want %d", c.err, got, c.want)
			}
		})
	}
}
