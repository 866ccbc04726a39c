// Package scripts_test runs the signagent command's testscript scripts
// (testdata/script): each runs the real binary, with the emulator and the
// bench beside it, in a directory of its own. They are a test binary of
// their own so that they run beside cmd/signagent's Go tests, whose
// in-process ones run one at a time, not after them.
package scripts_test

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
	"github.com/signagent/signagent/hsmtest"
)

func TestMain(m *testing.M) {
	testscript.Main(clitest.Isolated{M: m}, clitest.Commands)
}

// TestScripts runs the command-line scripts in testdata/script: each runs
// the real binary in its own directory with its own SoftHSM token.
func TestScripts(t *testing.T) {
	softhsm := hsmtest.Module(t) // fail early and clearly without SoftHSM
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
			return nil
		},
	})
}
