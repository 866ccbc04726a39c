package cmdutil

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/pkcs11/pinfile"
)

// A secret of the CLI and the agent: the flag naming its file, and the
// variable holding it ($ENV) or naming its file ($ENV_FILE). Every one is
// resolved by secret.Source, in its one order: the flag's file, $ENV,
// $ENV_FILE, the file the configuration names, a prompt where one is
// allowed.
type secretSpec struct {
	what string // "the API key"
	flag string // "api-key-file"
	Env  string // "SIGNAGENT_API_KEY"
}

// The secrets' specs: where each is given (its file flag and variables),
// not the secret itself nor its limits (pinfile.Secret is the PIN's
// source with the token's limits; PINSource joins the two). Each one's
// Env is in secret.Vars: kept out of the processes signagent starts
// (secret.ChildEnv).
var (
	PINSpec           = secretSpec{"the PIN", "pin-file", secret.PINEnv}
	APIKeySpec        = secretSpec{"the API key", "api-key-file", secret.APIKeyEnv}
	DeveloperKeySpec  = secretSpec{"the developer key", "developer-key-file", secret.DeveloperKeyEnv}
	PasswordSpec      = secretSpec{"the password", "password-file", secret.PasswordEnv}
	SIDSpec           = secretSpec{"the auth.sid", "sid-file", secret.SIDEnv}
	ClientSecretSpec  = secretSpec{"the client secret", "client-secret-file", secret.ClientSecretEnv}
	StorePasswordSpec = secretSpec{"the store password", "store-password-file", secret.StorePasswordEnv}
)

// secrets are all of them.
var secrets = []secretSpec{PINSpec, APIKeySpec, DeveloperKeySpec, PasswordSpec, SIDSpec, ClientSecretSpec, StorePasswordSpec}

// FlagWith is the secret's file flag, in category, its usage ending with more. It has no EnvVars: the variables are
// Read by source, so that a file named on the command line, one named in
// the environment and the secret itself in the environment rank apart.
func (s secretSpec) FlagWith(category, more string) *cli.StringFlag {
	return &cli.StringFlag{Name: s.flag, Category: category,
		Usage: fmt.Sprintf("read %s from `FILE` (else $%s, else the file $%s_FILE names%s)", s.what, s.Env, s.Env, more)}
}

// Source is where the secret comes from for this command's settings.
func (s secretSpec) Source(set *settings.Settings) secret.Source {
	given, file := set.Place(s.flag)
	return secret.Source{What: s.what, Flag: "--" + s.flag, File: given, Env: s.Env, EnvFile: s.Env + "_FILE",
		ConfigFile: file, ConfigKey: s.flag}
}

// Read resolves the secret, checked and normalized by parse, its error
// marked as kind (as well as its own kind).
func (s secretSpec) Read(set *settings.Settings, parse func(string) (string, error), kind error) (string, error) {
	src := s.Source(set)
	src.Parse = parse
	got, err := src.Resolve()
	if err != nil {
		return "", errdefs.Mark(err, kind)
	}
	return got.Value, nil
}

// PINSource is the PIN's source, with the token's limits on a PIN; prompt
// allows asking on a terminal (never in the daemon), naming the token by
// its label when one is known.
func PINSource(s *settings.Settings, prompt bool, label string) secret.Source {
	src := PINSpec.Source(s)
	limits := pinfile.Secret(src.File)
	src.Max, src.Parse = limits.Max, limits.Parse
	if prompt {
		src.Prompt = "Token PIN: "
		if label != "" {
			src.Prompt = fmt.Sprintf("PIN for token %q: ", label)
		}
	}
	return src
}
