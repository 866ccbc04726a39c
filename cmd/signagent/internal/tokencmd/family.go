package tokencmd

import "github.com/signagent/signagent/cmd/internal/cmdutil"

// Family is the PKCS#11 token commands (signagent token ...): the tokens
// and keys there are, the self-test of one, and a development token.
func Family(e *cmdutil.Env) cmdutil.Family {
	return cmdutil.Family{Category: "Smart cards and tokens", Commands: []cmdutil.Command{
		{Command: listCommand(e)},
		{Command: keysCommand(e)},
		{Command: checkCommand(e)},
		{Command: devCommand(e)},
	}}
}
