// Command signagent signs the service's trusted-authentication text on a
// PKCS#11 token and runs the trusted-authentication flow. See README.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/signagent/internal/agentcmd"
	"github.com/signagent/signagent/cmd/signagent/internal/configcmd"
	"github.com/signagent/signagent/cmd/signagent/internal/legacycmd"
	"github.com/signagent/signagent/cmd/signagent/internal/oidccmd"
	"github.com/signagent/signagent/cmd/signagent/internal/setupcmd"
	"github.com/signagent/signagent/cmd/signagent/internal/tokencmd"
	"github.com/signagent/signagent/cmd/signagent/internal/trustedcmd"
	"github.com/signagent/signagent/internal/benchcmd"
	"github.com/signagent/signagent/internal/cmdutil"
	"github.com/signagent/signagent/pkcs11"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	cmdutil.Version = version
	pkcs11.RunProbe() // when started by pkcs11.Probe: try the module and exit
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// run is main with its streams given, so tests can drive it in-process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmdutil.JSONLogs.Store(false)
	app := newApp(stdin, stdout, stderr)
	err := app.Run(args)
	if err == nil {
		return cmdutil.ExitOK
	}
	code := cmdutil.ExitCode(err)
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if cmdutil.JSONLogs.Load() {
		// Under --log-format json (serve in a journal, a log collector)
		// the failure is a JSON line like the others.
		log := zerolog.New(stderr).With().Timestamp().Logger()
		log.Error().Int("exit", code).Msg(msg)
		return code
	}
	fmt.Fprintf(stderr, "signagent: %s\n", msg)
	return code
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	e := &cmdutil.Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Log: zerolog.Nop()}
	// --version only: -v is too easily meant as "verbose".
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version"}
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, cmdutil.CurrentBuild()) }
	app := &cli.App{
		Name:    "signagent",
		Usage:   "sign the service's trusted-authentication text on a PKCS#11 token and obtain an auth.sid",
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
		Reader:          stdin,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		// Errors are printed once, by run, as one line.
		ExitErrHandler: func(*cli.Context, error) {},
		// A mistyped flag is answered with the one meant, when one is close.
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			flags := c.App.Flags
			if c.Command != nil && c.Command.Name != "" {
				flags = c.Command.Flags
			}
			return cmdutil.UsageErr(fmt.Errorf("%w%s", err, cmdutil.FlagSuggestion(err, flags)))
		},
		Commands: commands(e),
		// The completion scripts ask the program what comes next.
		EnableBashCompletion: true,
		// Without a command: the help. With a word that is no command:
		// one line naming the one meant, and exit 2 (the README's bad
		// input), not urfave's "No help topic" with exit 1.
		Action: func(c *cli.Context) error {
			if !c.Args().Present() {
				return cli.ShowAppHelp(c)
			}
			name := c.Args().First()
			if name == "emulator" {
				return cmdutil.UsageErr(errors.New("the emulator is a command of its own: signagent-emulator (make build puts it in bin/)"))
			}
			msg := fmt.Sprintf("%q is not a signagent command", name)
			if s := cmdutil.Suggest(name, cmdutil.CommandNames(c.App.Commands)); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			return cmdutil.UsageErr(errors.New(msg + " (signagent --help lists them)"))
		},
	}
	for _, cmd := range app.Commands {
		cmd.OnUsageError = app.OnUsageError
		// The logging flags are accepted after the command too, where
		// operators tend to put them (signagent sign --log-level debug).
		cmd.Flags = append(cmd.Flags, cmdutil.LogFlags("Logging")...)
		// Every command reads the settings file (serve's --config is its own:
		// reloaded on SIGHUP); config edits it, and the rest need none.
		reads := !slices.Contains([]string{"config", "version", "completion", "man"}, cmd.Name)
		if reads {
			cmd.Flags = append(cmd.Flags, cmdutil.SettingsFlags(cmd.Name != "serve")...)
		}
		cmd.Before = func(c *cli.Context) error {
			// No command but api and completion takes positional arguments.
			if !slices.Contains([]string{"api", "completion", "config", "agent", "bench", "token"}, c.Command.Name) {
				if err := cmdutil.NoArgs(c); err != nil {
					return err
				}
			}
			if reads {
				if err := cmdutil.LoadSettings(c); err != nil {
					return err
				}
			}
			if !c.IsSet("log-level") && !c.IsSet("log-format") && !c.IsSet("quiet") && !c.IsSet("verbose") {
				return nil
			}
			format := c.String("log-format")
			if !c.IsSet("log-format") {
				format = c.Lineage()[1].String("log-format")
			}
			log, err := cmdutil.NewLogger(stderr, cmdutil.LogLevel(c, c.Command.Name), format)
			if err == nil {
				e.Log = log
			}
			return err
		}
	}
	return app
}

// commands are signagent's commands, in the order help lists them.
func commands(e *cmdutil.Env) []*cli.Command {
	// The root help lists the commands by the job they belong to (urfave
	// sorts the groups by name: the names are chosen to read in this order).
	groups := []struct {
		category string
		cmds     []*cli.Command
	}{
		{"Auth.sid by trusted authentication", []*cli.Command{trustedcmd.CanonicalCommand(e), trustedcmd.SignCommand(e), trustedcmd.VerifyCommand(e), trustedcmd.LinkCommand(e), trustedcmd.SessionCommand(e)}},
		{"Business calls and the legacy scheme", []*cli.Command{legacycmd.LegacyTokenCommand(e), legacycmd.HeaderCommand(e), legacycmd.APICommand(e)}},
		{"OpenID Connect sign-in", []*cli.Command{oidccmd.LoginCommand(e), oidccmd.TokenCommand(e), oidccmd.StatusCommand(e), oidccmd.LogoutCommand(e)}},
		{"Running the agent", []*cli.Command{agentcmd.ServeCommand(e), agentcmd.AgentCommand(e), agentcmd.StoreKeyCommand(e), benchcmd.BenchCommand(e)}},
		{"Smart cards and tokens", []*cli.Command{tokencmd.TokensCommand(e), tokencmd.KeysCommand(e), tokencmd.DevTokenCommand(e)}},
		{"This program", []*cli.Command{setupcmd.SetupCommand(e), configcmd.ConfigCommand(e), configcmd.VersionCommand(e), configcmd.CompletionCommand(e), configcmd.ManCommand(e)}},
	}
	var all []*cli.Command
	for _, g := range groups {
		for _, c := range g.cmds {
			c.Category = g.category
			all = append(all, c)
		}
	}
	return all
}
