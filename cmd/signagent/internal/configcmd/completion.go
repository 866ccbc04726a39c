package configcmd

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/internal/httpx"
)

// The completion scripts ask signagent itself what may come next: they
// run the line so far, the word being completed last (empty for a new
// one), with --generate-bash-completion after it, and offer what it
// prints (cmdutil.Complete: subcommands, flags, a flag's values, context
// names), else file names. So they never go stale.
const bashCompletion = `# bash completion for signagent: source <(signagent completion bash)
_signagent() {
  local IFS=$'\n'
  COMPREPLY=($(compgen -W "$("${COMP_WORDS[@]:0:COMP_CWORD+1}" --generate-bash-completion 2>/dev/null)" -- "${COMP_WORDS[COMP_CWORD]}"))
}
complete -o bashdefault -o default -F _signagent signagent
`

const zshCompletion = `#compdef signagent
# zsh completion for signagent: put it in a directory of $fpath as _signagent,
# or source <(signagent completion zsh) after compinit.
_signagent() {
  local -a opts
  opts=("${(@f)$("${(@)words[1,CURRENT]}" --generate-bash-completion 2>/dev/null)}")
  if [[ -n ${opts[1]} ]]; then
    compadd -a opts
  else
    _files
  fi
}
if [[ ${funcstack[1]} == _signagent ]]; then
  _signagent "$@"
else
  compdef _signagent signagent
fi
`

const fishCompletion = `# fish completion for signagent: signagent completion fish | source,
# or put it in ~/.config/fish/completions/signagent.fish.
function __signagent_complete
    set -l words (commandline -opc)
    set -l cur (commandline -ct)
    set -l out ($words[1] $words[2..-1] "$cur" --generate-bash-completion 2>/dev/null)
    test -n "$out"; and printf '%s\n' $out
end
# Without an answer from signagent the rule does not apply: file names.
complete -c signagent -f -n '__signagent_complete >/dev/null' -a '(__signagent_complete)'
`

// completionShells are the shells completion writes a script for.
var completionShells = []string{"bash", "zsh", "fish"}

func completionCommand(e *cmdutil.Env) *cli.Command {
	return cmdutil.ArgValues(&cli.Command{
		Name:      "completion",
		Args:      true, // checked by the command itself (its subcommands, or its own arguments)
		Usage:     "write the shell completion script for bash, zsh or fish",
		UsageText: "signagent completion bash|zsh|fish",
		Description: "Writes a completion script on stdout. To load it now:\n\n" +
			"   source <(signagent completion bash)\n" +
			"   source <(signagent completion zsh)      # after compinit\n" +
			"   signagent completion fish | source\n\n" +
			"The Debian package installs all three; by hand, put the output in\n" +
			"/usr/share/bash-completion/completions/signagent, a directory of $fpath as _signagent,\n" +
			"or ~/.config/fish/completions/signagent.fish.\n\n" +
			cmdutil.Examples("signagent completion bash > ~/.local/share/bash-completion/completions/signagent", "signagent completion fish | source"),
		Action: func(c *cli.Context) error {
			shell, err := readCompletion(c)
			if err != nil {
				return err
			}
			return runCompletion(e, shell)
		},
	}, func([]string) []string { return completionShells })
}

// readCompletion reads completion's one argument: the shell.
func readCompletion(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", cmdutil.UsageErr(errors.New("name one shell: signagent completion bash|zsh|fish"))
	}
	return c.Args().First(), nil
}

// runCompletion writes the completion script of shell.
func runCompletion(e *cmdutil.Env, shell string) error {
	switch shell {
	case "bash":
		_, err := fmt.Fprint(e.Stdout, bashCompletion)
		return err
	case "zsh":
		_, err := fmt.Fprint(e.Stdout, zshCompletion)
		return err
	case "fish":
		_, err := io.WriteString(e.Stdout, fishCompletion)
		return err
	default:
		msg := fmt.Sprintf("%q is not a shell signagent completes: want %s", httpx.Printable(shell, 32), strings.Join(completionShells, ", "))
		return cmdutil.UsageErr(errors.New(msg))
	}
}

func manCommand(e *cmdutil.Env) *cli.Command {
	return &cli.Command{
		Name:        "man",
		Usage:       "write the signagent(1) manual page (roff) on stdout",
		UsageText:   "signagent man > signagent.1 && man ./signagent.1",
		Description: cmdutil.Examples("signagent man > signagent.1 && man ./signagent.1", "signagent man | man -l -"),
		Action: func(c *cli.Context) error {
			page, err := cmdutil.ManPage(c.App, cmdutil.ManDate())
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(e.Stdout, page)
			return err
		},
	}
}
