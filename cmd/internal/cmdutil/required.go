package cmdutil

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/settings"
)

// Need is a setting a command cannot do without, and where it may come
// from: every one missing is named at once, in one line, before anything
// else is done.
type Need struct {
	what    string // "trusted-url", "the API key"
	where   string // "--trusted-url, $SIGNAGENT_TRUSTED_URL or trusted-url in the settings file"
	present bool
}

// FlagNeed is a flag's value, from the flag, its variable or the file.
func FlagNeed(c *cli.Context, name string) Need {
	where := []string{"--" + name}
	for _, fl := range c.Command.Flags {
		if ev, ok := fl.(interface{ GetEnvVars() []string }); ok && FlagName(fl) == name {
			for _, v := range ev.GetEnvVars() {
				where = append(where, "$"+v)
			}
		}
	}
	return Need{what: name, where: orList(append(where, name+" in the settings file")), present: c.String(name) != ""}
}

// Need is a secret's sources.
func (s secretSpec) Need(set *settings.Settings) Need {
	return Need{what: s.what, where: orList([]string{"--" + s.flag, "$" + s.Env, "$" + s.Env + "_FILE", s.flag + " in the settings file"}),
		present: s.Source(set).Given()}
}

func orList(l []string) string {
	if len(l) == 1 {
		return l[0]
	}
	return strings.Join(l[:len(l)-1], ", ") + " or " + l[len(l)-1]
}

// Missing is the usage error naming every need not met, nil when all are.
func Missing(needs ...Need) error {
	var out []string
	for _, n := range needs {
		if !n.present {
			out = append(out, fmt.Sprintf("%s (%s)", n.what, n.where))
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return UsageErr(errors.New("missing setting: " + out[0]))
	}
	return UsageErr(errors.New("missing settings: " + strings.Join(out, "; ")))
}
