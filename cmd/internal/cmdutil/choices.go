package cmdutil

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/internal/httpx"
)

// choices are the values a string flag accepts, by the flag: one list
// that the check before a command runs (CheckChoices), the error naming
// the one meant (BadChoice) and the shell completion all read.
var choices sync.Map // cli.Flag → []string

// OneOf makes fl accept only values (case aside), and returns it.
func OneOf(fl *cli.StringFlag, values ...string) *cli.StringFlag {
	choices.Store(cli.Flag(fl), values)
	return fl
}

// Choices are the values fl accepts, nil when any is.
func Choices(fl cli.Flag) []string {
	v, _ := choices.Load(fl)
	l, _ := v.([]string)
	return l
}

// BadChoice is the usage error for value given to --name, which wants one
// of values: `--scheme "lgacy": want oidc, legacy or trusted; did you mean
// "legacy"?`.
func BadChoice(name, value string, values []string) error {
	msg := fmt.Sprintf("--%s %q: want %s", name, httpx.Printable(value, 32), orList(values))
	if s := Suggest(strings.ToLower(value), values); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return UsageErr(errors.New(msg))
}

// CheckChoices refuses a value of the command's flags (given, from a
// variable or from the settings file) that is not among the flag's
// choices, before the command does anything.
func CheckChoices(c *cli.Context) error {
	if c.Command == nil {
		return nil
	}
	for _, fl := range c.Command.Flags {
		values := Choices(fl)
		if values == nil {
			continue
		}
		name := FlagName(fl)
		if v := c.String(name); v != "" && !hasFold(values, v) {
			return BadChoice(name, v, values)
		}
	}
	return nil
}

func hasFold(l []string, v string) bool {
	for _, s := range l {
		if strings.EqualFold(s, v) {
			return true
		}
	}
	return false
}
