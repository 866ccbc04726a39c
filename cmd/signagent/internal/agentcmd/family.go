package agentcmd

import "github.com/signagent/signagent/cmd/internal/cmdutil"

// Family is the agent's commands: serve, asking a running agent, and the
// shared store's key.
func Family(e *cmdutil.Env) cmdutil.Family {
	return cmdutil.Family{Category: "Running the agent", Commands: []cmdutil.Command{
		{Command: serveCommand(e), Settings: cmdutil.OwnSettings},
		{Command: agentCommand(e)},
		{Command: storeKeyCommand(e)},
	}}
}
