package setupcmd

import "github.com/signagent/signagent/cmd/internal/cmdutil"

// Family is setup, which writes a settings context that works.
func Family(e *cmdutil.Env) cmdutil.Family {
	return cmdutil.Family{Category: "This program", Commands: []cmdutil.Command{
		{Command: setupCommand(e), Settings: cmdutil.OfferSettings},
	}}
}
