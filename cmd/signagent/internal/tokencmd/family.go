package tokencmd

import (
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// Family is the token commands: the tokens and keys there are, and a
// development token.
func Family(f *factory.Factory) cmdutil.Family {
	e := f.Env
	return cmdutil.Family{Category: "Smart cards and tokens", Commands: []cmdutil.Command{
		{Command: tokensCommand(e)},
		{Command: keysCommand(e)},
		{Command: devTokenCommand(e)},
	}}
}
