package configcmd

import (
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// Family is the commands about signagent itself: its settings file,
// version, completion and manual page.
func Family(f *factory.Factory) cmdutil.Family {
	e := f.Env
	return cmdutil.Family{Category: "This program", Commands: []cmdutil.Command{
		{Command: configCommand(e), Settings: cmdutil.NoSettings},
		{Command: versionCommand(e), Settings: cmdutil.NoSettings},
		{Command: completionCommand(e), Settings: cmdutil.NoSettings},
		{Command: manCommand(e), Settings: cmdutil.NoSettings},
	}}
}
