package factory

import (
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/schemes"
)

// This file is where a scheme beyond legacy and OpenID Connect gets its
// settings, for the agent (serve), signagent api and header alike: its flags in
// MoreSchemeFlags, one line reading them in MoreSchemes. The scheme itself
// is a package implementing authz.Scheme and one entry in the list
// (schemes.List), which both commands build from with what they lend it
// (schemes.Deps); see docs/architecture.md, "Adding things".

// MoreSchemeFlags are those schemes' flags.
func MoreSchemeFlags() []cli.Flag { return nil }

// MoreSchemes reads those schemes' settings into set (a scheme left
// unset there is off, saying what it lacks).
func MoreSchemes(*settings.Settings, *cmdutil.Env, *schemes.Settings) {}
