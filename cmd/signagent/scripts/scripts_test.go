// Package scripts_test runs the signagent command's testscript scripts
// (testdata/script): each runs the real binary, with the emulator and the
// bench beside it, in a directory of its own. They are a test binary of
// their own so that they run beside cmd/signagent's Go tests, whose
// in-process ones run one at a time, not after them.
package scripts_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/schemes"
)

func TestMain(m *testing.M) {
	testscript.Main(clitest.Isolated{M: m}, clitest.Commands)
}

// TestScripts runs the command-line scripts in testdata/script: each runs
// the real binary in its own directory with its own SoftHSM token.
func TestScripts(t *testing.T) {
	softhsm := pkcs11test.Module(t) // fail early and clearly without SoftHSM
	testscript.Run(t, testscript.Params{
		Dir:  "testdata/script",
		Cmds: scriptCmds,
		Setup: func(env *testscript.Env) error {
			env.Values[scriptStateKey{}] = &scriptState{}
			env.Setenv("HOME", env.WorkDir)
			// SoftHSM by name, as dev-token's export lines say: without
			// it the default is p11-kit's proxy where p11-kit-modules is
			// installed, which also loads OpenSC's and the TPM's modules
			// (and the TPM's prints its own errors on stderr).
			env.Setenv("SIGNAGENT_PKCS11_MODULE", softhsm)
			env.Setenv("SIGNAGENT_API_KEY", "0F6C2E5B-9D4A-4C1E-8A2B-7E3D1F0A9B8C")
			schemeVars(env)
			return nil
		},
	})
}

// schemeVars are the values of header's and api's --scheme, as the
// scripts expect them named, from the one list (schemes.List), so that a
// scheme added there is expected everywhere without a script edited:
// SCHEMES_HEADER and SCHEMES_API as a mistyped value's error names them
// ("oidc or legacy"), SCHEMES_BASH as bash completes api's (the list's
// order), SCHEMES_FISH as fish does (sorted, a line each). The default,
// oidc, comes first; api also takes trusted, last.
func schemeVars(env *testscript.Env) {
	header := []string{authz.SchemeOIDC}
	for _, e := range schemes.List() {
		if e.Name != authz.SchemeOIDC {
			header = append(header, e.Name)
		}
	}
	api := append(slices.Clone(header), authz.SchemeTrusted)
	or := func(l []string) string { return strings.Join(l[:len(l)-1], ", ") + " or " + l[len(l)-1] }
	env.Setenv("SCHEMES_HEADER", or(header))
	env.Setenv("SCHEMES_API", or(api))
	env.Setenv("SCHEMES_BASH", strings.Join(api, " "))
	sorted := slices.Sorted(slices.Values(api))
	env.Setenv("SCHEMES_FISH", strings.Join(sorted, "\n")+"\n")
}
