package cmdutil

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// A word of a command line, as the command tree reads it: shell
// completion and the reordering of flags after positional arguments both
// walk a line the same way urfave/cli parses it.
type word struct {
	text string
	kind wordKind
	flag cli.Flag // the flag a flag or value word belongs to
}

type wordKind int

const (
	wordCommand    wordKind = iota // a command's or subcommand's name
	wordFlag                       // --name, --name=value, -q
	wordValue                      // the value of the flag before it
	wordPositional                 // a positional argument
	wordDashes                     // --: what follows is positional only
)

// walked is a line read against the command tree: the words with their
// kind, and the command the line ends in (nil: the program itself).
type walked struct {
	words []word
	cmd   *cli.Command
}

// walk reads words (argv without the program's name) against app's
// commands: a word naming a subcommand of the command reached, before any
// positional argument, enters it; a flag that takes a value takes the next
// word (unless given as --name=value); after -- every word is positional.
func walk(app *cli.App, words []string) walked {
	var w walked
	flags, subs := app.Flags, app.Commands
	dashes, positional := false, false
	for i := 0; i < len(words); i++ {
		t := words[i]
		switch {
		case dashes:
			w.words = append(w.words, word{text: t, kind: wordPositional})
		case t == "--":
			dashes = true
			w.words = append(w.words, word{text: t, kind: wordDashes})
		case strings.HasPrefix(t, "-") && t != "-":
			name, _, hasValue := strings.Cut(strings.TrimLeft(t, "-"), "=")
			fl := findFlag(flags, name)
			w.words = append(w.words, word{text: t, kind: wordFlag, flag: fl})
			if !hasValue && takesValue(fl) && i+1 < len(words) {
				i++
				w.words = append(w.words, word{text: words[i], kind: wordValue, flag: fl})
			}
		case !positional && findCommand(subs, t) != nil:
			w.cmd = findCommand(subs, t)
			flags, subs = w.cmd.Flags, w.cmd.Subcommands
			w.words = append(w.words, word{text: t, kind: wordCommand})
		default:
			positional = true
			w.words = append(w.words, word{text: t, kind: wordPositional})
		}
	}
	return w
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, fl := range flags {
		for _, n := range FlagNames(fl) {
			if n == name {
				return fl
			}
		}
	}
	return nil
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// takesValue says whether fl reads the next word as its value (every
// flag but a boolean one); an unknown flag takes none.
func takesValue(fl cli.Flag) bool {
	d, ok := fl.(cli.DocGenerationFlag)
	return ok && d.TakesValue()
}

// FlagsFirst is args (argv, the program's name first) with the flags
// that follow a command's positional arguments moved before them, as gh
// and git accept them (signagent api /GetMyOrganizations --scheme oidc):
// urfave/cli, like Go's flag package, stops reading flags at the first
// positional argument. Words after -- are left where they are, and stay
// positional; a flag's value moves with it.
func FlagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	w := walk(app, args[1:])
	if w.cmd == nil {
		return args
	}
	out := []string{args[0]}
	var flags, positionals, rest []string
	dashes := false
	for _, wd := range w.words {
		switch {
		case dashes:
			rest = append(rest, wd.text)
		case wd.kind == wordDashes:
			dashes = true
		case wd.kind == wordPositional:
			positionals = append(positionals, wd.text)
		case wd.kind == wordCommand:
			// A command's name ends the flags of the one before it.
			out = append(append(out, flags...), wd.text)
			flags = nil
		default:
			flags = append(flags, wd.text)
		}
	}
	out = append(out, flags...)
	if dashes {
		out = append(out, "--")
	}
	return append(append(out, positionals...), rest...)
}
