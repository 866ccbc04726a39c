// Package app is the signagent command: its command tree, wired from the
// families, and its entrance. Package main only stamps the version; the
// tests of cmd/signagent and cmd/signagent/scripts run it as their
// signagent binary.
package app

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/pkcs11/probe"
)

// Main is signagent's main: the probe of a module when probe.Module
// started it, else the command line, exiting with its status.
func Main() {
	probe.Run() // when started by probe.Module: try the module and exit
	// Every command may hold a secret (a PIN, the client secret, a
	// session): none leaves in a core file or through /proc to another
	// process of the user.
	if _, err := secret.KeepFromOtherProcesses(); err != nil {
		fmt.Fprintf(os.Stderr, "signagent: warning: %v\n", err)
	}
	os.Exit(Run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// Run is main with its streams given, so tests can drive it in-process.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmdutil.JSONLogs.Store(false)
	app := NewApp(stdin, stdout, stderr)
	// The completion scripts ask what may come next (the line so far, the
	// word being completed last): answered here, from the command tree,
	// before anything runs.
	if n := len(args); n > 1 && args[n-1] == cmdutil.CompletionFlag {
		cmdutil.Complete(app, args[1:n-1], stdout)
		return cmdutil.ExitOK
	}
	return cmdutil.Finish("signagent", app.Run(cmdutil.FlagsFirst(app, args)), stderr)
}

// urfave/cli's version flag and printer are package variables: set once,
// not by each app built (tests build apps in parallel).
func init() {
	// --version only: -v is too easily meant as "verbose".
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version"}
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, cmdutil.CurrentBuild()) }
}

// NewApp is the command tree writing to the streams given.
func NewApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	e := &cmdutil.Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Log: zerolog.Nop()}
	// One factory for the run: the families get it when their commands
	// are made, the command that runs is bound to it before its action,
	// and what it opened is closed once, after.
	f := factory.New(e)
	top, wired := commands(f)
	app := &cli.App{
		Name:    "signagent",
		Usage:   "the service's authentication agent: auth.sid, legacy and OpenID Connect headers from a PKCS#11 token, on the command line and for partner systems",
		Version: cmdutil.CurrentBuild().Version,
		Flags:   append(cmdutil.LogFlags(""), cmdutil.SettingsFlags(true)...),
		Before: func(c *cli.Context) error {
			log, err := cmdutil.NewLogger(stderr, cmdutil.LogLevel(c, c.Args().First()), c.String("log-format"))
			if err != nil {
				return err
			}
			e.Log = log
			return nil
		},
		After: func(*cli.Context) error {
			f.Close()
			return nil
		},
		Reader:          stdin,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		// Errors are printed once, by Run, as one line.
		ExitErrHandler: func(*cli.Context, error) {},
		// A mistyped flag is answered with the one meant, when one is close.
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			flags := c.App.Flags
			if c.Command != nil && c.Command.Name != "" {
				flags = c.Command.Flags
			}
			return cmdutil.UsageErr(fmt.Errorf("%w%s", err, cmdutil.FlagSuggestion(err, flags)))
		},
		Commands: top,
		// Without a command: the help. With a word that is no command:
		// one line naming the one meant, and exit 2 (the README's bad
		// input), not urfave's "No help topic" with exit 1.
		Action: func(c *cli.Context) error {
			if !c.Args().Present() {
				return cli.ShowAppHelp(c)
			}
			name := c.Args().First()
			// Commands of their own, not in the shipped binary.
			switch name {
			case "emulator":
				return cmdutil.UsageErr(errors.New("the emulator is a command of its own: signagent-emulator (make build puts it in bin/)"))
			case "bench":
				return cmdutil.UsageErr(errors.New("the benchmark is a command of its own: signagent-bench (make build puts it in bin/)"))
			}
			msg := fmt.Sprintf("%q is not a signagent command", name)
			olds := oldSpellings()
			names := cmdutil.CommandNames(c.App.Commands)
			for old := range olds {
				names = append(names, old)
			}
			if s := cmdutil.Suggest(name, names); s != "" {
				if now, ok := olds[s]; ok { // a command's name before the nouns, mistyped
					s = now
				}
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			return cmdutil.UsageErr(errors.New(msg + " (signagent --help lists them)"))
		},
	}
	for _, p := range wired {
		wire(e, p.cmd, p.use, app.OnUsageError)
		if p.old != "" {
			sayOld(p.cmd, p.old, p.now)
		}
	}
	for _, cmd := range top {
		bind(f, cmd)
	}
	return app
}

// bind makes the factory build for the command that runs: cmd, or one of
// its subcommands, whichever's action runs (one per run).
func bind(f *factory.Factory, cmd *cli.Command) {
	if act := cmd.Action; act != nil {
		cmd.Action = func(c *cli.Context) error {
			f.Bind(c)
			return act(c)
		}
	}
	for _, sub := range cmd.Subcommands {
		bind(f, sub)
	}
}

// wire gives a command what every command has: the logging flags after
// it too, the settings flags and file as its use says, and stray
// positional arguments refused unless it takes some (cmd.Args).
func wire(e *cmdutil.Env, cmd *cli.Command, use cmdutil.SettingsUse, onUsageError cli.OnUsageErrorFunc) {
	cmd.OnUsageError = onUsageError
	// A subcommand's bad flag too is one line and exit 2, not its help
	// (config contexts --json printed the whole help, exit 1).
	setUsageError(cmd.Subcommands, onUsageError)
	// The logging flags are accepted after the command too, where
	// operators tend to put them (signagent trusted sign --log-level debug).
	cmd.Flags = append(cmd.Flags, cmdutil.LogFlags("Logging")...)
	// A renamed flag's old spelling, hidden, for one release.
	cmd.Flags = append(cmd.Flags, cmdutil.OldFlags(cmd.Flags)...)
	// serve's --config is its own: reloaded on SIGHUP.
	if use != cmdutil.NoSettings {
		cmd.Flags = append(cmd.Flags, cmdutil.SettingsFlags(use != cmdutil.OwnSettings)...)
	}
	// A word that names no subcommand: one line naming the one meant.
	if len(cmd.Subcommands) > 0 && cmd.Action == nil {
		cmd.Action = cmdutil.UnknownSubcommand
	}
	cmd.Before = func(c *cli.Context) error {
		if err := cmdutil.UseOldFlags(c, e.Stderr); err != nil {
			return err
		}
		if !c.Command.Args {
			if err := cmdutil.NoArgs(c); err != nil {
				return err
			}
		}
		if use != cmdutil.NoSettings {
			if err := cmdutil.ReadSettings(c, use); err != nil {
				return err
			}
		}
		if err := cmdutil.CheckChoices(c); err != nil {
			return err
		}
		if !c.IsSet("log-level") && !c.IsSet("log-format") && !c.IsSet("quiet") && !c.IsSet("verbose") {
			return nil
		}
		format := c.String("log-format")
		if !c.IsSet("log-format") {
			format = c.Lineage()[1].String("log-format")
		}
		log, err := cmdutil.NewLogger(e.Stderr, cmdutil.LogLevel(c, c.Command.Name), format)
		if err == nil {
			e.Log = log
		}
		return err
	}
}

// setUsageError gives cmds and theirs onUsageError, where they have none.
func setUsageError(cmds []*cli.Command, onUsageError cli.OnUsageErrorFunc) {
	for _, c := range cmds {
		if c.OnUsageError == nil {
			c.OnUsageError = onUsageError
		}
		setUsageError(c.Subcommands, onUsageError)
	}
}
