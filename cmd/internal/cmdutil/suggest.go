package cmdutil

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
	"github.com/xrash/smetrics"

	"github.com/signagent/signagent/internal/httpx"
)

// closeEnough is the Jaro-Winkler similarity from which a name is offered
// as the one meant ("sesion" → "session"); below it nothing is offered
// rather than a guess ("xyzzy" is not "keys").
const closeEnough = 0.85

// Suggest returns the candidate most like name, or "" when none is close
// enough.
func Suggest(name string, candidates []string) string {
	best, score := "", 0.0
	for _, c := range candidates {
		if s := smetrics.JaroWinkler(name, c, 0.7, 4); s > score {
			best, score = c, s
		}
	}
	if score < closeEnough {
		return ""
	}
	return best
}

// CommandNames are the names and aliases of cmds, the hidden old
// spellings aside (the new one is what to suggest).
func CommandNames(cmds []*cli.Command) []string {
	var out []string
	for _, c := range cmds {
		if !c.Hidden {
			out = append(out, c.Names()...)
		}
	}
	return out
}

// FlagSuggestion is `; did you mean "--phone"?` for the flag err names as
// undefined ("flag provided but not defined: -phon"), or "".
func FlagSuggestion(err error, flags []cli.Flag) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok {
		return ""
	}
	name = strings.TrimLeft(name, "-")
	var names []string
	for _, f := range flags {
		if visible(f) {
			names = append(names, FlagNames(f)...)
		}
	}
	if s := Suggest(name, names); s != "" {
		return `; did you mean "--` + s + `"?`
	}
	return ""
}

// UnknownSubcommand is the action of a command made of subcommands (config,
// agent): without one, its help; with a word that names none, one line
// naming the one meant, and exit 2, not urfave's "No help topic" and exit 1.
//
// A word close to no name is not echoed: it may be a secret typed in the
// wrong place (signagent token 0F6C2E5B...).
func UnknownSubcommand(c *cli.Context) error {
	if !c.Args().Present() {
		return cli.ShowSubcommandHelp(c)
	}
	name := c.Args().First()
	if Suggest(name, CommandNames(c.Command.Subcommands)) == "" {
		return UsageErr(fmt.Errorf("that is not a subcommand of signagent %s (signagent %s --help lists them)", c.Command.Name, c.Command.Name))
	}
	return notASubcommand(c, name)
}

func notASubcommand(c *cli.Context, name string) error {
	msg := fmt.Sprintf("%q is not a subcommand of signagent %s", httpx.Printable(name, 32), c.Command.Name)
	if s := Suggest(name, CommandNames(c.Command.Subcommands)); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return UsageErr(errors.New(msg + fmt.Sprintf(" (signagent %s --help lists them)", c.Command.Name)))
}

// visible says whether a flag is shown (in help, completion, the manual
// page and suggestions): not an old spelling kept hidden.
func visible(f cli.Flag) bool {
	v, ok := f.(cli.VisibleFlag)
	return !ok || v.IsVisible()
}
