package legacycmd

import (
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// Family is the legacy scheme's commands and signagent api, the business
// call with any scheme's header.
func Family(f *factory.Factory) cmdutil.Family {
	return cmdutil.Family{Category: "Authentication schemes", Commands: []cmdutil.Command{
		{Command: legacyTokenCommand(f)},
		{Command: headerCommand(f)},
		{Command: apiCommand(f)},
	}}
}
