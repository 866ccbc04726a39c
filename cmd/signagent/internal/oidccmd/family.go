package oidccmd

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// Family is the OpenID Connect commands: signing in and out, the access
// token and the profile's status.
func Family(f *factory.Factory) cmdutil.Family {
	return cmdutil.Family{Category: "Authentication schemes", Commands: []cmdutil.Command{
		{Command: loginCommand(f)},
		{Command: tokenCommand(f)},
		{Command: statusCommand(f)},
		{Command: logoutCommand(f)},
	}}
}

// oidcFlags are the OpenID Connect flags of this family's commands: the
// shared ones (factory.OIDCFlags) and, as the provider is all they reach,
// its transport's.
func oidcFlags() []cli.Flag {
	return append(cmdutil.OIDCFlags(),
		&cli.BoolFlag{Name: "insecure-http", Category: cmdutil.CatOIDC, EnvVars: []string{"SIGNAGENT_INSECURE_HTTP"}, Usage: "allow plain http to a non-loopback identity provider"},
		&cli.DurationFlag{Name: "request-timeout", Category: cmdutil.CatOIDC, Value: 15 * time.Second, EnvVars: []string{"SIGNAGENT_REQUEST_TIMEOUT"}, Usage: "give up on one request after `DURATION`"})
}
