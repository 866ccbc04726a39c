package cmdutil

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/settings"
)

// LogFlags are --log-level and --log-format, in the given help category.
func LogFlags(category string) []cli.Flag {
	return []cli.Flag{
		OneOf(&cli.StringFlag{Name: "log-level", Category: category, EnvVars: []string{"SIGNAGENT_LOG_LEVEL"}, DefaultText: "warn; info for serve", Usage: "`LEVEL`: debug, info, warn or error"}, logLevels...),
		OneOf(&cli.StringFlag{Name: "log-format", Category: category, Value: "console", EnvVars: []string{"SIGNAGENT_LOG_FORMAT"}, Usage: "`FORMAT`: console or json"}, logFormats...),
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Category: category, Usage: "log errors only (--log-level error)"},
		&cli.BoolFlag{Name: "verbose", Category: category, Usage: "say what is done, not only what goes wrong (--log-level info)"},
	}
}

// ReadLog reads LogFlags' level and format from s (the settings file
// may name them: serve's); level is "" when none is given.
func ReadLog(s *settings.Settings) (level, format string) {
	return s.String("log-level"), s.String("log-format")
}

var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{"console", "json"}
)

// LogLevel is the log level for command: --log-level (or
// SIGNAGENT_LOG_LEVEL) when given, else error with --quiet, info with
// --verbose, else warn: a command that succeeds says nothing but its
// result; serve, a daemon, logs at info.
func LogLevel(c *cli.Context, command string) string {
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

// Quiet says whether the command was asked to say nothing but errors
// (-q, --quiet or --log-level error): its notes on stderr are left out.
func Quiet(c *cli.Context) bool { return LogLevel(c, c.Command.Name) == "error" }

// Log and audit lines carry their time in RFC 3339 with milliseconds, in
// UTC (zerolog's default is whole seconds in local time: two lines of one
// second could not be ordered, and machines in two zones not compared).
func init() {
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	zerolog.TimestampFunc = func() time.Time { return time.Now().UTC() }
}

// JSONLogs is set once a logger writes JSON: the final error is then a
// JSON line too.
var JSONLogs atomic.Bool

// NewLogger is the logger writing to w at level, in format (console or
// json).
func NewLogger(w io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), BadChoice("log-level", level, logLevels)
	}
	switch format {
	case "json":
		JSONLogs.Store(true)
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: true}
	default:
		return zerolog.Nop(), BadChoice("log-format", format, logFormats)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}
