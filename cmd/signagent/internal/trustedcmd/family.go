package trustedcmd

import "github.com/signagent/signagent/cmd/internal/cmdutil"

// Family is the trusted-authentication commands: the signed text, its
// signature, linking a user and the auth.sid.
func Family(e *cmdutil.Env) cmdutil.Family {
	return cmdutil.Family{Category: "Authentication schemes", Commands: []cmdutil.Command{
		{Command: canonicalCommand(e)},
		{Command: signCommand(e)},
		{Command: verifyCommand(e)},
		{Command: linkCommand(e)},
		{Command: sessionCommand(e)},
	}}
}
