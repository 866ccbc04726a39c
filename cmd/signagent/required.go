package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/internal/settings"
)

// need is a setting a command cannot do without, and where it may come
// from: every one missing is named at once, in one line, before anything
// else is done.
type need struct {
	what    string // "base-url", "the API key"
	where   string // "--base-url, $SIGNAGENT_BASE_URL or base-url in the settings file"
	present bool
}

// flagNeed is a flag's value, from the flag, its variable or the file.
func flagNeed(c *cli.Context, name string) need {
	where := []string{"--" + name}
	for _, fl := range c.Command.Flags {
		if ev, ok := fl.(interface{ GetEnvVars() []string }); ok && fl.Names()[0] == name {
			for _, v := range ev.GetEnvVars() {
				where = append(where, "$"+v)
			}
		}
	}
	return need{what: name, where: orList(append(where, name+" in the settings file")), present: c.String(name) != ""}
}

// need is a secret's sources.
func (s secretSpec) need(set *settings.Settings) need {
	return need{what: s.what, where: orList([]string{"--" + s.flag, "$" + s.env, "$" + s.env + "_FILE", s.flag + " in the settings file"}),
		present: s.source(set).Given()}
}

func orList(l []string) string {
	if len(l) == 1 {
		return l[0]
	}
	return strings.Join(l[:len(l)-1], ", ") + " or " + l[len(l)-1]
}

// missing is the usage error naming every need not met, nil when all are.
func missing(needs ...need) error {
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
		return usageErr(errors.New("missing setting: " + out[0]))
	}
	return usageErr(errors.New("missing settings: " + strings.Join(out, "; ")))
}
