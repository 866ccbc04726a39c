package cmdutil

import (
	"slices"
	"testing"

	"github.com/signagent/signagent/internal/secret"
)

// TestSecretVars: the variables kept from child processes
// (secret.ChildEnv) are those of every secret a command reads, no fewer.
func TestSecretVars(t *testing.T) {
	var got []string
	for _, s := range secrets {
		got = append(got, s.Env)
		if !secret.IsVar(s.Env) || !secret.IsVar(s.Env+"_FILE") {
			t.Errorf("%s (%s) is not in secret.Vars: the processes signagent starts would get it", s.Env, s.what)
		}
	}
	if !slices.Equal(got, secret.Vars) {
		t.Errorf("secret.Vars %v, the secrets' variables %v", secret.Vars, got)
	}
	env := []string{"SIGNAGENT_PIN=1", "SIGNAGENT_PIN_FILE=/p", "SIGNAGENT_PINNED=x", "PATH=/bin", "SIGNAGENT_SID=s", "SIGNAGENT_CONFIG=/c"}
	if got, want := secret.ChildEnv(env), []string{"SIGNAGENT_PINNED=x", "PATH=/bin", "SIGNAGENT_CONFIG=/c"}; !slices.Equal(got, want) {
		t.Errorf("ChildEnv: %v, want %v", got, want)
	}
}
