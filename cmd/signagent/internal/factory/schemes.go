package factory

import (
	"github.com/signagent/signagent/authz"
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/schemes"
)

// This file is where a scheme beyond legacy and OpenID Connect gets its
// settings, for the agent (serve), signagent api and header alike: its flags in
// MoreSchemeFlags, one line reading them in moreSchemes. The scheme itself
// is a package implementing authz.Scheme and one entry in the list
// (schemes.List), which both commands build from with what they lend it
// (schemes.Deps); see docs/architecture.md, "Adding things".

// MoreSchemeFlags are those schemes' flags.
func MoreSchemeFlags() []cli.Flag { return nil }

// moreSchemes reads those schemes' settings into set (a scheme left
// unset there is off, saying what it lacks).
func moreSchemes(*settings.Settings, *cmdutil.Env, *schemes.Settings) {}

// SchemeSettings are the schemes' settings for a command (header, api):
// the legacy client, the OpenID Connect records (in the run's store) and
// their refresh and those of MoreSchemes; a scheme the settings do not
// configure is off, saying why.
func (f *Factory) SchemeSettings() schemes.Settings {
	set := schemes.Settings{Off: map[string]error{}}
	if lc, err := f.LegacyConfig(); err != nil {
		set.Off[authz.SchemeLegacy] = err
	} else {
		set.Legacy = &schemes.LegacySettings{Client: lc}
	}
	if o, err := f.oidcSettings(); err != nil {
		set.Off[authz.SchemeOIDC] = err
	} else {
		set.OIDC = o
	}
	moreSchemes(f.Settings(), f.Env, &set)
	return set
}
