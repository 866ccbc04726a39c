package cmdutil

import (
	"fmt"
	"strings"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
)

// APICredential is a checked credential as the agent's API takes it.
func APICredential(cred canonical.Credential) *agentapi.Credential {
	out := &agentapi.Credential{}
	switch cred.Kind {
	case canonical.Phone:
		out.Phone = cred.Value
	case canonical.SNILS:
		out.SNILS = cred.Value
	case canonical.Thumbprint:
		out.Thumbprint = cred.Value
	}
	return out
}

// LegacyPassword is one --legacy-password-file LOGIN=FILE: the login and
// where its password is read from (the agent reads it, doctor checks it,
// with the same Source).
func LegacyPassword(spec string) (string, secret.Source, error) {
	login, file, ok := strings.Cut(spec, "=")
	login = strings.TrimSpace(login)
	if !ok || login == "" || file == "" {
		return "", secret.Source{}, fmt.Errorf("%w: --legacy-password-file %q: want LOGIN=FILE", errdefs.ErrInvalidInput, spec)
	}
	return login, secret.Source{What: "the password of " + login, File: file, Flag: "--legacy-password-file"}, nil
}
