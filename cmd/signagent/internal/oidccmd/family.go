package oidccmd

import "github.com/signagent/signagent/cmd/internal/cmdutil"

// Family is the OpenID Connect commands: signing in and out, the access
// token and the profile's status.
func Family(e *cmdutil.Env) cmdutil.Family {
	return cmdutil.Family{Category: "Authentication schemes", Commands: []cmdutil.Command{
		{Command: loginCommand(e)},
		{Command: tokenCommand(e)},
		{Command: statusCommand(e)},
		{Command: logoutCommand(e)},
	}}
}
