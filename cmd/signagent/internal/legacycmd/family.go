package legacycmd

import "github.com/signagent/signagent/cmd/internal/cmdutil"

// Family is the legacy scheme's commands and signagent api, the business
// call with any scheme's header.
func Family(e *cmdutil.Env) cmdutil.Family {
	return cmdutil.Family{Category: "Authentication schemes", Commands: []cmdutil.Command{
		{Command: legacyTokenCommand(e)},
		{Command: headerCommand(e)},
		{Command: apiCommand(e)},
	}}
}
