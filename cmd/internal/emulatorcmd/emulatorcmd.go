// Package emulatorcmd is the signagent-emulator command: an emulator of
// the service (trusted, legacy, identity provider and business sides) on
// loopback, for tests, the demo and trying an integration. The command
// (cmd/signagent-emulator) and signagent's tests run it.
package emulatorcmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/internal/secret"
)

// Main runs the command with the process's arguments and exits.
func Main() { os.Exit(Run(os.Args, os.Stdin, os.Stdout, os.Stderr)) }

// usageError is a mistake in the command line or the configuration: exit 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usage(err error) error { return usageError{err} }

// Run runs the command and returns its exit status: 0, 2 for a mistake in
// the command line or the configuration (one line on stderr), 1 otherwise.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var log zerolog.Logger
	app := &cli.App{
		Name:      "signagent-emulator",
		Usage:     "run an emulator of the service (trusted, legacy, identity provider, business) on loopback",
		UsageText: "signagent-emulator --config FILE [--listen 127.0.0.1:18080] [--url-file FILE]\n   signagent-emulator --hash-password < password",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:18080", Usage: "loopback `HOST:PORT` to serve on (port 0 picks a free one)"},
			&cli.StringFlag{Name: "config", Usage: "YAML `FILE` of partners, developers, users and organizations (see docs/emulator.md)"},
			&cli.StringFlag{Name: "url-file", Usage: "write the base URL to `FILE` once listening"},
			&cli.BoolFlag{Name: "hash-password", Usage: "read a password (a prompt on a terminal, else a line of stdin), print its passwordHash for the configuration, and exit"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		Reader: stdin, Writer: stdout, ErrWriter: stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		OnUsageError:    func(_ *cli.Context, err error, _ bool) error { return usage(err) },
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usage(errors.New("this command takes no positional arguments; see --help"))
			}
			lvl, err := zerolog.ParseLevel(c.String("log-level"))
			if err != nil || c.String("log-level") == "" {
				return usage(fmt.Errorf("--log-level %q: want debug, info, warn or error", c.String("log-level")))
			}
			log = zerolog.New(zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly, NoColor: true}).Level(lvl).With().Timestamp().Logger()
			if c.Bool("hash-password") {
				return hashPassword(stdin, stdout, stderr)
			}
			if c.String("config") == "" {
				return usage(errors.New("give the emulator's configuration with --config FILE"))
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			err = emulator.RunLoopback(ctx, c.String("listen"), c.String("config"), c.String("url-file"), log)
			if errors.Is(err, emulator.ErrConfig) {
				return usage(err)
			}
			return err
		},
	}
	err := app.Run(args)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "signagent-emulator: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}

// hashPassword prints the bcrypt hash of a password read from the terminal
// (without echo) or from one line of stdin.
func hashPassword(stdin io.Reader, stdout, stderr io.Writer) error {
	var pw []byte
	var err error
	if tty, ok := stdin.(*os.File); ok && secret.IsTerminal(tty) {
		pw, err = secret.Prompt(tty, stderr, "Password to hash: ")
	} else {
		line, rerr := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
		pw, err = []byte(strings.TrimRight(line, "\r\n")), rerr
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	if err == nil && len(pw) == 0 {
		err = errors.New("the password is empty")
	}
	if err != nil {
		return usage(fmt.Errorf("--hash-password: %w", err))
	}
	h, err := emulator.HashPassword(pw)
	if err != nil {
		return usage(fmt.Errorf("--hash-password: %w", err))
	}
	_, err = fmt.Fprintln(stdout, h)
	return err
}
