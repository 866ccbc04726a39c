package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/business"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/trusted"
)

// Every kind has an exit status of its own choosing: a kind added to
// errdefs without one would exit 1.
func TestEveryKindHasAnExitCode(t *testing.T) {
	t.Parallel()
	for _, k := range errdefs.Kinds {
		if _, ok := cmdutil.ExitCodes[k]; !ok {
			t.Errorf("kind %q has no exit code", k)
		}
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"usage", cmdutil.UsageErr(errors.New("--x")), cmdutil.ExitBadInput},
		{"bad credential", fmt.Errorf("sign: %w", canonical.ErrInvalidCredential), cmdutil.ExitBadInput},
		{"no PIN", tokenerr.ErrPINMissing, cmdutil.ExitBadInput},
		{"PIN refused", &tokenerr.TokenError{Op: "log in", Kind: tokenerr.ErrPINIncorrect, Err: errors.New("x")}, cmdutil.ExitFailure},
		{"refused", &trusted.ServiceError{Status: 403, Code: trusted.CodeUserNotFound}, cmdutil.ExitRefused},
		{"refused twice", &authz.RefusedError{Identity: "oidc crm", Status: 401}, cmdutil.ExitRefused},
		{"failing", &trusted.ServiceError{Status: 500}, cmdutil.ExitTransport},
		{"reused", &trusted.ServiceError{Status: 409, Code: trusted.CodeSignatureReused}, cmdutil.ExitRetry},
		{"business 429", &business.Error{Method: "/GetMyOrganizations", Status: 429}, cmdutil.ExitTransport},
		{"business 403", &business.Error{Method: "/GetMyEmployee", Status: 403}, cmdutil.ExitRefused},
		{"sign in", oidc.ErrSignIn, cmdutil.ExitSignIn},
		{"store down", oidc.ErrStoreUnavailable, cmdutil.ExitTransport},
		{"no kind", errors.New("boom"), cmdutil.ExitFailure},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := cmdutil.ExitCode(c.err); got != c.want {
				t.Fatalf("exitCode(%v) = %d, want %d", c.err, got, c.want)
			}
		})
	}
}
