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
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/pkcs11"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit statuses.
const (
	exitOK          = 0
	exitFailure     = 1   // anything not below
	exitBadInput    = 2   // bad input or usage
	exitRefused     = 3   // the service refused
	exitTransport   = 4   // the service could not be reached or timed out
	exitSignIn      = 5   // OpenID Connect: sign in (again): none, refused refresh token, expired device code
	exitRetry       = 6   // try again in a second: the service saw this signed text already (another process)
	exitInterrupted = 130 // Ctrl-C
)

func main() {
	Version = version
	pkcs11.RunProbe() // when started by pkcs11.Probe: try the module and exit
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// run is main with its streams given, so tests can drive it in-process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	jsonLogs.Store(false)
	app := newApp(stdin, stdout, stderr)
	err := app.Run(args)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if jsonLogs.Load() {
		// Under --log-format json (serve in a journal, a log collector)
		// the failure is a JSON line like the others.
		log := zerolog.New(stderr).With().Timestamp().Logger()
		log.Error().Int("exit", code).Msg(msg)
		return code
	}
	fmt.Fprintf(stderr, "signagent: %s\n", msg)
	return code
}

// env holds what every command shares: streams and the logger.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	log    zerolog.Logger
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, log: zerolog.Nop()}
	// --version only: -v is too easily meant as "verbose".
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version"}
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, currentBuild()) }
	app := &cli.App{
		Name:    "signagent",
		Usage:   "sign the service's trusted-authentication text on a PKCS#11 token and obtain an auth.sid",
		Version: currentBuild().Version,
		Flags:   append(logFlags(""), settingsFlags(true)...),
		Before: func(c *cli.Context) error {
			log, err := newLogger(stderr, logLevel(c, c.Args().First()), c.String("log-format"))
			if err != nil {
				return err
			}
			e.log = log
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
			return usageErr(fmt.Errorf("%w%s", err, flagSuggestion(err, flags)))
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
				return usageErr(errors.New("the emulator is a command of its own: signagent-emulator (make build puts it in bin/)"))
			}
			msg := fmt.Sprintf("%q is not a signagent command", name)
			if s := suggest(name, commandNames(c.App.Commands)); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			return usageErr(errors.New(msg + " (signagent --help lists them)"))
		},
	}
	for _, cmd := range app.Commands {
		cmd.OnUsageError = app.OnUsageError
		// The logging flags are accepted after the command too, where
		// operators tend to put them (signagent sign --log-level debug).
		cmd.Flags = append(cmd.Flags, logFlags("Logging")...)
		// Every command reads the settings file (serve's --config is its own:
		// reloaded on SIGHUP); config edits it, and the rest need none.
		reads := !slices.Contains([]string{"config", "version", "completion", "man"}, cmd.Name)
		if reads {
			cmd.Flags = append(cmd.Flags, settingsFlags(cmd.Name != "serve")...)
		}
		cmd.Before = func(c *cli.Context) error {
			// No command but api and completion takes positional arguments.
			if !slices.Contains([]string{"api", "completion", "config", "agent", "bench", "token"}, c.Command.Name) {
				if err := noArgs(c); err != nil {
					return err
				}
			}
			if reads {
				if err := loadSettings(c); err != nil {
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
			log, err := newLogger(stderr, logLevel(c, c.Command.Name), format)
			if err == nil {
				e.log = log
			}
			return err
		}
	}
	return app
}

// commands are signagent's commands, in the order help lists them.
func commands(e *env) []*cli.Command {
	// The root help lists the commands by the job they belong to (urfave
	// sorts the groups by name: the names are chosen to read in this order).
	groups := []struct {
		category string
		cmds     []*cli.Command
	}{
		{"Auth.sid by trusted authentication", []*cli.Command{canonicalCommand(e), signCommand(e), verifyCommand(e), linkCommand(e), sessionCommand(e)}},
		{"Business calls and the legacy scheme", []*cli.Command{legacyTokenCommand(e), headerCommand(e), apiCommand(e)}},
		{"OpenID Connect sign-in", []*cli.Command{loginCommand(e), tokenCommand(e), statusCommand(e), logoutCommand(e)}},
		{"Running the agent", []*cli.Command{serveCommand(e), agentCommand(e), storeKeyCommand(e), benchCommand(e)}},
		{"Smart cards and tokens", []*cli.Command{tokensCommand(e), keysCommand(e), devTokenCommand(e)}},
		{"This program", []*cli.Command{setupCommand(e), configCommand(e), versionCommand(e), completionCommand(e), manCommand(e)}},
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

// logFlags are --log-level and --log-format, in the given help category.
func logFlags(category string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Category: category, EnvVars: []string{"SIGNAGENT_LOG_LEVEL"}, DefaultText: "warn; info for serve", Usage: "`LEVEL`: debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Category: category, Value: "console", EnvVars: []string{"SIGNAGENT_LOG_FORMAT"}, Usage: "`FORMAT`: console or json"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Category: category, Usage: "log errors only (--log-level error)"},
		&cli.BoolFlag{Name: "verbose", Category: category, Usage: "say what is done, not only what goes wrong (--log-level info)"},
	}
}

// logLevel is the log level for command: --log-level (or
// SIGNAGENT_LOG_LEVEL) when given, else error with --quiet, info with
// --verbose, else warn: a command that succeeds says nothing but its
// result; serve, a daemon, logs at info.
func logLevel(c *cli.Context, command string) string {
	for _, ctx := range c.Lineage() {
		if ctx.IsSet("log-level") {
			return ctx.String("log-level")
		}
	}
	for _, ctx := range c.Lineage() {
		switch {
		case ctx.IsSet("quiet") && ctx.Bool("quiet"):
			return "error"
		case ctx.IsSet("verbose") && ctx.Bool("verbose"):
			return "info"
		}
	}
	if command == "serve" {
		return "info"
	}
	return "warn"
}

// Log and audit lines carry their time in RFC 3339 with milliseconds, in
// UTC (zerolog's default is whole seconds in local time: two lines of one
// second could not be ordered, and machines in two zones not compared).
func init() {
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	zerolog.TimestampFunc = func() time.Time { return time.Now().UTC() }
}

// jsonLogs is set once a logger writes JSON: the final error is then a
// JSON line too.
var jsonLogs atomic.Bool

func newLogger(w io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), usageErr(fmt.Errorf("--log-level %q: want debug, info, warn or error", level))
	}
	switch format {
	case "json":
		jsonLogs.Store(true)
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: true}
	default:
		return zerolog.Nop(), usageErr(fmt.Errorf("--log-format %q: want console or json", format))
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// exitError carries an exit status with an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(err error) error { return &exitError{exitBadInput, err} }

// exitCodes is the one table from an error's kind to the exit status.
var exitCodes = map[error]int{
	errdefs.ErrInvalidInput:     exitBadInput,
	errdefs.ErrNotConfigured:    exitBadInput,
	errdefs.ErrRefused:          exitRefused,
	errdefs.ErrForbidden:        exitRefused,
	errdefs.ErrFailing:          exitTransport, // 5xx or 429 after retries: the service is failing or limiting requests
	errdefs.ErrUnreachable:      exitTransport,
	errdefs.ErrTimeout:          exitTransport,
	errdefs.ErrStoreUnavailable: exitTransport,
	errdefs.ErrSignIn:           exitSignIn,
	errdefs.ErrTryAgain:         exitRetry,
	errdefs.ErrTokenNotReady:    exitFailure,
}

// exitCode is the exit status for err: the one the command chose, else its
// kind's.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if code, ok := exitCodes[errdefs.Kind(err)]; ok {
		return code
	}
	return exitFailure
}
