package agentcmd

import (
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// Family is the agent's commands: serve, asking a running agent, and the
// shared store's key.
func Family(f *factory.Factory) cmdutil.Family {
	e := f.Env
	return cmdutil.Family{Category: "Running the agent", Commands: []cmdutil.Command{
		{Command: serveCommand(f), Settings: cmdutil.OwnSettings},
		{Command: agentCommand(e)},
		{Command: storeKeyCommand(e)},
	}}
}
