package trustedcmd

import (
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// Family is the trusted-authentication commands: the signed text, its
// signature, linking a user and the auth.sid.
func Family(f *factory.Factory) cmdutil.Family {
	e := f.Env
	return cmdutil.Family{Category: "Authentication schemes", Commands: []cmdutil.Command{
		{Command: canonicalCommand(f)},
		{Command: signCommand(f)},
		{Command: verifyCommand(e)},
		{Command: linkCommand(f)},
		{Command: sessionCommand(f)},
	}}
}
