package tokencmd

import (
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// Family is the PKCS#11 token commands (signagent token ...): the tokens
// and keys there are, the self-test of one, and a development token.
func Family(f *factory.Factory) cmdutil.Family {
	e := f.Env
	return cmdutil.Family{Category: "Smart cards and tokens", Commands: []cmdutil.Command{
		{Command: listCommand(e)},
		{Command: keysCommand(e)},
		{Command: checkCommand(f)},
		{Command: devCommand(e)},
	}}
}
