package cmdutil

import (
	"io"
	"os"
	"reflect"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/settings"
)

// The old spellings of this release's renames (settings.Renamed) as
// hidden flags: each renamed flag of a command gets its old name and old
// variable beside it, out of --help, completion and the manual page, and
// UseOldFlags gives their value to the new flag with one line on stderr.

// OldFlags are the hidden old flags of the renamed ones among flags.
func OldFlags(flags []cli.Flag) []cli.Flag {
	var out []cli.Flag
	names := flagNameSet(flags)
	for _, fl := range flags {
		name := FlagName(fl)
		old := settings.OldName(name)
		if old == "" || names[old] {
			continue
		}
		out = append(out, &cli.StringFlag{Name: old, Hidden: true, EnvVars: []string{settings.EnvOf(old)}})
	}
	return out
}

// flagNameSet is the set of every name of flags. urfave/cli's Names runs a
// regular expression at each call, and looking a command's flags up one
// by one made building the CLI quadratic in them (most of its start-up).
func flagNameSet(flags []cli.Flag) map[string]bool {
	names := make(map[string]bool, len(flags))
	for _, f := range flags {
		for _, n := range FlagNames(f) {
			names[n] = true
		}
	}
	return names
}

// UseOldFlags gives each renamed flag of c's command the value of its old
// flag or variable when that was given, keeping the precedence flag >
// variable (the new flag, else the old flag, else the new variable, else
// the old one), and writes one line to w for each old spelling given.
func UseOldFlags(c *cli.Context, w io.Writer) error {
	flags := c.Command.Flags
	names := flagNameSet(flags)
	for _, fl := range flags {
		now := FlagName(fl)
		old := settings.OldName(now)
		if old == "" || !names[old] || !c.IsSet(old) {
			continue
		}
		oldEnv, newEnv := settings.EnvOf(old), settings.EnvOf(now)
		oldOnLine := onLine(c, old, oldEnv)
		if oldOnLine {
			settings.SayRenamed(w, "--"+old, "--"+now)
		}
		if v, ok := os.LookupEnv(oldEnv); ok && v != "" {
			settings.SayRenamed(w, oldEnv, newEnv)
		}
		switch {
		case onLine(c, now, newEnv):
		case oldOnLine:
			if err := c.Set(now, c.String(old)); err != nil {
				return err
			}
		case c.IsSet(now): // its variable
		default:
			if err := c.Set(now, os.Getenv(oldEnv)); err != nil {
				return err
			}
		}
	}
	return nil
}

// onLine says whether the flag name was given on the command line rather
// than by its variable env only. (urfave/cli tells them apart only by
// value: a flag given the variable's very value may count as the
// variable, which comes to the same.)
func onLine(c *cli.Context, name, env string) bool {
	if !c.IsSet(name) {
		return false
	}
	v, ok := os.LookupEnv(env)
	return !ok || v == "" || v != c.String(name)
}

// HideFlags hides flags from help, completion and the manual page: the
// flags of `signagent token` given no subcommand, the old spelling of
// `signagent oidc token`. urfave/cli's flag types each have a Hidden
// field and no setter.
func HideFlags(flags []cli.Flag) {
	for _, fl := range flags {
		if f := reflect.ValueOf(fl).Elem().FieldByName("Hidden"); f.IsValid() && f.CanSet() {
			f.SetBool(true)
		}
	}
}

// NewKey is key as the settings file's keys are named now: a renamed
// key's new name, with the line naming it on w; any other key as it is.
func NewKey(w io.Writer, key string) string {
	if now, ok := settings.Renamed[key]; ok {
		settings.SayRenamed(w, key, now)
		return now
	}
	return key
}
