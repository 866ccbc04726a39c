package tokencmd

import "github.com/signagent/signagent/cmd/internal/cmdutil"

// Family is the token commands: the tokens and keys there are, and a
// development token.
func Family(e *cmdutil.Env) cmdutil.Family {
	return cmdutil.Family{Category: "Smart cards and tokens", Commands: []cmdutil.Command{
		{Command: tokensCommand(e)},
		{Command: keysCommand(e)},
		{Command: devTokenCommand(e)},
	}}
}
