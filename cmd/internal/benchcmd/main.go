// Package benchcmd is signagent-bench: the token, CMS signing and the
// agent measured in one run, and the agent's proxy against nginx. It is a
// command of its own, beside signagent-emulator, because it starts the
// emulator in its process: the shipped signagent holds neither.
package benchcmd

import (
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
)

// Main runs signagent-bench with the process's arguments and streams, and
// exits with its status.
func Main() { os.Exit(Run(os.Args, os.Stdin, os.Stdout, os.Stderr)) }

// Run is Main with its arguments and streams given.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmdutil.JSONLogs.Store(false)
	return cmdutil.Finish("signagent-bench", NewApp(stdin, stdout, stderr).Run(args), stderr)
}

// NewApp is signagent-bench over the streams given.
func NewApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	e := &cmdutil.Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Log: zerolog.Nop()}
	app := newApp(e)
	app.Version = cmdutil.CurrentBuild().Version
	app.Flags = append(app.Flags, append(cmdutil.LogFlags("Logging"), cmdutil.SettingsFlags(true)...)...)
	app.Before = func(c *cli.Context) error {
		log, err := cmdutil.NewLogger(stderr, cmdutil.LogLevel(c, ""), c.String("log-format"))
		e.Log = log
		return err
	}
	app.Reader, app.Writer, app.ErrWriter = stdin, stdout, stderr
	app.HideHelpCommand = true
	// Errors are printed once, by Finish, as one line.
	app.ExitErrHandler = func(*cli.Context, error) {}
	app.OnUsageError = func(c *cli.Context, err error, _ bool) error {
		flags := c.App.Flags
		if c.Command != nil && c.Command.Name != "" {
			flags = c.Command.Flags
		}
		return cmdutil.UsageErr(fmt.Errorf("%w%s", err, cmdutil.FlagSuggestion(err, flags)))
	}
	for _, cmd := range app.Commands {
		cmd.OnUsageError = app.OnUsageError
		// A renamed flag's old spelling (--cert), hidden, for one release,
		// as signagent's commands have it.
		cmd.Flags = append(cmd.Flags, cmdutil.OldFlags(cmd.Flags)...)
		before := cmd.Before
		cmd.Before = func(c *cli.Context) error {
			if err := cmdutil.UseOldFlags(c, stderr); err != nil {
				return err
			}
			if before != nil {
				return before(c)
			}
			return nil
		}
	}
	return app
}
