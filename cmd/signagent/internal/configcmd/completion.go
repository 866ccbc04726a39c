package configcmd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/internal/cmdutil"
	"github.com/signagent/signagent/internal/httpx"
)

// The completion scripts ask signagent itself what may come next
// (urfave/cli's hidden --generate-bash-completion flag, which lists the
// commands, or a command's flags after a dash), so they never go stale.
const bashCompletion = `# bash completion for signagent: source <(signagent completion bash)
_signagent() {
  local cur=${COMP_WORDS[COMP_CWORD]} IFS=$'\n' out
  local -a words=("${COMP_WORDS[@]:0:COMP_CWORD}")
  if [[ $cur == -* ]]; then
    out=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    out=$("${words[@]}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "$out" -- "$cur"))
}
complete -o bashdefault -o default -F _signagent signagent
`

const zshCompletion = `#compdef signagent
# zsh completion for signagent: put it in a directory of $fpath as _signagent,
# or source <(signagent completion zsh) after compinit.
_signagent() {
  local cur=${words[CURRENT]}
  local -a opts
  if [[ $cur == -* ]]; then
    opts=("${(@f)$(${words[1,CURRENT-1]} $cur --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[1,CURRENT-1]} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ -n ${opts[1]} ]]; then
    _describe 'signagent' opts
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

// completionShells are the shells completion writes a script for.
var completionShells = []string{"bash", "zsh", "fish"}

func completionCommand(e *cmdutil.Env) *cli.Command {
	return &cli.Command{
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
			"or ~/.config/fish/completions/signagent.fish.",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cmdutil.UsageErr(errors.New("name one shell: signagent completion bash|zsh|fish"))
			}
			switch shell := c.Args().First(); shell {
			case "bash":
				_, err := fmt.Fprint(e.Stdout, bashCompletion)
				return err
			case "zsh":
				_, err := fmt.Fprint(e.Stdout, zshCompletion)
				return err
			case "fish":
				script, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				_, err = fmt.Fprint(e.Stdout, script)
				return err
			default:
				msg := fmt.Sprintf("%q is not a shell signagent completes: want %s", httpx.Printable(shell, 32), strings.Join(completionShells, ", "))
				return cmdutil.UsageErr(errors.New(msg))
			}
		},
	}
}

func manCommand(e *cmdutil.Env) *cli.Command {
	return &cli.Command{
		Name:      "man",
		Usage:     "write the signagent(1) manual page (roff) on stdout",
		UsageText: "signagent man > signagent.1 && man ./signagent.1",
		Action: func(c *cli.Context) error {
			page, err := c.App.ToManWithSection(1)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(e.Stdout, page)
			return err
		},
	}
}
