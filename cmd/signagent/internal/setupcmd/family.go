package setupcmd

import (
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// Family is setup, which writes a settings context that works.
func Family(f *factory.Factory) cmdutil.Family {
	return cmdutil.Family{Category: "This program", Commands: []cmdutil.Command{
		{Command: setupCommand(f), Settings: cmdutil.OfferSettings},
	}}
}
