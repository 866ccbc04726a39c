package factory

import (
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/internal/cmdutil"
	"github.com/signagent/signagent/internal/settings"
)

// This file is where a scheme beyond legacy and OpenID Connect is wired
// in, for the agent (serve) and signagent api alike: its flags in
// MoreSchemeFlags, one line building it in moreSchemes. The scheme itself
// is a package implementing authz.Scheme (see docs/architecture.md,
// "Adding things"). There is none today: legacy and OpenID Connect need
// the token and the caches the agent holds, and are built there.

// MoreSchemeFlags are those schemes' flags.
func MoreSchemeFlags() []cli.Flag { return nil }

// MoreSchemes are those schemes as the settings configure them (a scheme
// that is not configured is authz.Off, saying what it lacks).
func MoreSchemes(*settings.Settings, *cmdutil.Env) authz.Schemes { return nil }
