package cmdutil

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/settings"
)

// CompletionFlag is the last word of a line the completion scripts ask
// signagent to complete (urfave/cli's name for it, kept so that scripts
// written by earlier versions still work).
const CompletionFlag = "--generate-bash-completion"

// argValues are the values a command's positional arguments take, by the
// command (completion bash|zsh|fish, config use-context NAME).
var argValues sync.Map // *cli.Command → func(line []string) []string

// ArgValues gives cmd's positional arguments their values for completion;
// values is given the line so far (it may name --config).
func ArgValues(cmd *cli.Command, values func(line []string) []string) *cli.Command {
	argValues.Store(cmd, values)
	return cmd
}

// Complete writes, one a line, what may take the place of the last of
// words (argv without the program's name, the word being completed last,
// "" for a new one): a flag's values (its choices, the settings file's
// contexts for --context) after a flag that takes one; the command's flags
// for a word starting with - (--<TAB> lists them all; never after --, and
// never -h, which is --help's alias); else its subcommands, or the values
// of its positional arguments. Nothing written: the scripts fall back to
// file names.
func Complete(app *cli.App, words []string, w io.Writer) {
	if len(words) == 0 {
		words = []string{""}
	}
	line, cur := words[:len(words)-1], words[len(words)-1]
	at := walk(app, line)
	flags, subs := app.Flags, app.Commands
	if at.cmd != nil {
		flags, subs = at.cmd.Flags, at.cmd.Subcommands
	}
	var out []string
	last := word{}
	if n := len(at.words); n > 0 {
		last = at.words[n-1]
	}
	dashes := false
	for _, wd := range at.words {
		dashes = dashes || wd.kind == wordDashes
	}
	switch {
	case last.kind == wordFlag && takesValue(last.flag) && !strings.Contains(last.text, "="):
		out = flagValues(last.flag, line)
	case strings.HasPrefix(cur, "-") && !dashes:
		out = flagNames(flags)
	default:
		if f, ok := argValues.Load(at.cmd); ok && at.cmd != nil {
			out = f.(func([]string) []string)(line)
		}
		if !hasPositional(at.words) {
			out = append(out, commandNames(subs)...)
		}
	}
	for _, s := range out {
		if strings.HasPrefix(s, cur) {
			fmt.Fprintln(w, s)
		}
	}
}

func hasPositional(words []word) bool {
	for _, wd := range words {
		if wd.kind == wordPositional || wd.kind == wordDashes {
			return true
		}
	}
	return false
}

// flagNames are the names of flags, hidden ones aside: --name, and -x
// for a one-letter alias other than --help's -h (one way to ask for help
// is enough), --help last.
func flagNames(flags []cli.Flag) []string {
	var out []string
	for _, fl := range flags {
		if v, ok := fl.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		for _, n := range FlagNames(fl) {
			switch {
			case n == "h" || n == "help":
			case len(n) == 1:
				out = append(out, "-"+n)
			default:
				out = append(out, "--"+n)
			}
		}
	}
	return append(out, "--help")
}

func commandNames(cmds []*cli.Command) []string {
	var out []string
	for _, c := range cmds {
		if !c.Hidden && c.Name != "help" {
			out = append(out, c.Name)
		}
	}
	return out
}

// flagValues are the values fl takes: its choices, the contexts of the
// settings file (of --config or $SIGNAGENT_CONFIG in line) for --context.
func flagValues(fl cli.Flag, line []string) []string {
	if v := Choices(fl); v != nil {
		return v
	}
	if FlagName(fl) == "context" {
		return ContextNames(line)
	}
	return nil
}

// ContextNames are the contexts of the settings file line names (--config
// FILE), else of $SIGNAGENT_CONFIG's, else the default one; none when it
// cannot be read.
func ContextNames(line []string) []string {
	path := os.Getenv("SIGNAGENT_CONFIG")
	for i, s := range line {
		if v, ok := strings.CutPrefix(s, "--config="); ok {
			path = v
		} else if s == "--config" && i+1 < len(line) {
			path = line[i+1]
		}
	}
	if path == "" {
		path = settings.DefaultPath()
	}
	f, err := settings.ReadFile(path, "", false, func(string) bool { return true })
	if err != nil {
		return nil
	}
	return f.Contexts
}
