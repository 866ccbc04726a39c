package secret

import (
	"slices"
	"strings"
)

// The variables that hold a secret of signagent: each may also be given
// as the file its NAME_FILE variable names (see Source).
const (
	APIKeyEnv        = "SIGNAGENT_API_KEY"
	DeveloperKeyEnv  = "SIGNAGENT_DEVELOPER_KEY"
	PasswordEnv      = "SIGNAGENT_PASSWORD"
	SIDEnv           = "SIGNAGENT_SID"
	ClientSecretEnv  = "SIGNAGENT_CLIENT_SECRET"
	StorePasswordEnv = "SIGNAGENT_STORE_PASSWORD"
)

// Vars are the variables that hold a secret (PINEnv and the constants
// above); every secret a command resolves through Source has its Env here.
var Vars = []string{PINEnv, APIKeyEnv, DeveloperKeyEnv, PasswordEnv, SIDEnv, ClientSecretEnv, StorePasswordEnv}

// IsVar reports whether the variable name holds a secret, or names the
// file of one (NAME_FILE).
func IsVar(name string) bool {
	return slices.Contains(Vars, strings.TrimSuffix(name, "_FILE"))
}

// ChildEnv is environ (os.Environ's form, NAME=value) without the
// variables that hold a secret or name its file: the environment of every
// process signagent starts (a browser, a module's probe), which has no
// use for them and would hand them on to whatever it starts in turn.
func ChildEnv(environ []string) []string {
	return slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return IsVar(name)
	})
}
