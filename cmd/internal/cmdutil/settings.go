package cmdutil

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/settings"
)

// Every command's settings file: the flags that choose it and its context,
// reading it, and giving its values to the flags not given. The config
// command that edits it is in cmd_config.go.

const catSettings = "Settings"

// SettingsFlags choose the settings file and its context; every command
// takes them (serve has its own --config, reloaded on SIGHUP).
func SettingsFlags(withConfig bool) []cli.Flag {
	fl := []cli.Flag{
		&cli.StringFlag{Name: "context", Category: catSettings, EnvVars: []string{"SIGNAGENT_CONTEXT"}, Usage: "use the settings file's context `NAME` (default: its current-context)"},
	}
	if withConfig {
		fl = append([]cli.Flag{&cli.StringFlag{Name: "config", Category: catSettings, EnvVars: []string{"SIGNAGENT_CONFIG"}, DefaultText: "$XDG_CONFIG_HOME/signagent/config.yaml",
			Usage: "read settings from `FILE`: keys are the flags' names, with named contexts"}}, fl...)
	}
	return fl
}

// SettingsPath is the run's settings file: --config or SIGNAGENT_CONFIG
// (named: it must be there), else the default one (read when there).
func SettingsPath(c *cli.Context) (path string, named bool) {
	if ctx := settings.GivenIn(c, "config"); ctx != nil {
		return ctx.String("config"), true
	}
	return settings.DefaultPath(), false
}

// ContextName is the context --context or SIGNAGENT_CONTEXT names ("":
// the file's current one).
func ContextName(c *cli.Context) string {
	if ctx := settings.GivenIn(c, "context"); ctx != nil {
		return ctx.String("context")
	}
	return ""
}

// KnownKeys accepts the names of every flag of every command: one file
// serves them all.
func KnownKeys(app *cli.App) func(string) bool {
	known := map[string]bool{}
	var walk func(cmds []*cli.Command)
	add := func(fl []cli.Flag) {
		for _, f := range fl {
			for _, n := range FlagNames(f) {
				known[n] = true
			}
		}
	}
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			add(c.Flags)
			walk(c.Subcommands)
		}
	}
	add(app.Flags)
	walk(app.Commands)
	for _, k := range []string{"config", "context", "help", "version"} {
		delete(known, k)
	}
	return func(k string) bool { return known[k] }
}

// LoadSettings reads the run's settings file and attaches it for every
// settings.Of; the file's values become the values of the flags not
// given, so that every flag, however the command reads it, has its key.
func LoadSettings(c *cli.Context) error { return ReadSettings(c, ApplySettings) }

// ReadSettings reads the run's settings file for a command that uses it
// as use says, and attaches it for every settings.Of.
func ReadSettings(c *cli.Context, use SettingsUse) error {
	path, named := SettingsPath(c)
	context := ContextName(c)
	if use == OfferSettings {
		context = "" // the context it names is the one it makes
	}
	f, err := settings.ReadFile(path, context, named, KnownKeys(c.App))
	if err != nil {
		return UsageErr(err)
	}
	if use != OwnSettings { // serve's own reading names them (settings.Load)
		f.SayRenamedKeys(c.App.ErrWriter)
	}
	settings.Attach(c.App, f)
	if use != OfferSettings { // setup exports what it is given
		if err := f.Export(); err != nil {
			return UsageErr(err)
		}
	}
	if use != ApplySettings {
		return nil // serve reads it itself (again on SIGHUP); setup offers its values
	}
	if err := applyFile(c, f); err != nil {
		return UsageErr(err)
	}
	return nil
}

// applyFile sets each of the command's flags that was not given (flag or
// variable) to the file's value, every bad value named at once. The
// secrets' file flags are left to the secret source, where a secret in
// the environment ranks between the flag's file and the file's.
func applyFile(c *cli.Context, f *settings.File) error {
	secretFiles := map[string]bool{}
	for _, file := range settings.SecretKeys {
		secretFiles[file] = true
	}
	var errs []string
	set := map[string]bool{}
	if c.App.Metadata == nil {
		c.App.Metadata = map[string]any{}
	}
	c.App.Metadata[fromFileKey] = set
	for _, fl := range c.Command.Flags {
		name := FlagName(fl)
		v, ok := f.Value(name)
		if !ok || secretFiles[name] || settings.GivenIn(c, name) != nil {
			continue
		}
		values := []string{fmt.Sprint(v)}
		if l, isList := v.([]any); isList {
			if !IsListFlag(fl) {
				errs = append(errs, fmt.Sprintf("%s: %s: want one value, not a list", f.Where(name), name))
				continue
			}
			values = values[:0]
			for _, e := range l {
				values = append(values, fmt.Sprint(e))
			}
		}
		for _, s := range values {
			if err := c.Set(name, s); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %s: want %s, not %q", f.Where(name), name, WantOf(fl), s))
				break
			}
			set[name] = true
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// IsListFlag says whether fl takes several values (a slice flag).
func IsListFlag(fl cli.Flag) bool {
	switch fl.(type) {
	case *cli.StringSliceFlag, *cli.IntSliceFlag, *cli.Int64SliceFlag, *cli.UintSliceFlag, *cli.Float64SliceFlag:
		return true
	}
	return false
}

// WantOf says what a flag takes, for an error about a value it refused.
func WantOf(fl cli.Flag) string {
	switch fl.(type) {
	case *cli.BoolFlag:
		return "true or false"
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag, *cli.IntSliceFlag, *cli.Int64SliceFlag:
		return "a whole number"
	case *cli.DurationFlag:
		return "a duration like 30s or 12h"
	case *cli.Float64Flag:
		return "a number"
	}
	if d, ok := fl.(cli.DocGenerationFlag); ok && d.TakesValue() {
		return "a value " + d.GetUsage()
	}
	return "a value it takes"
}

// fromFileKey is where applyFile notes the flags it set from the file.
const fromFileKey = "signagent/from-file"

// FromFile are the flags whose values came from the settings file.
func FromFile(app *cli.App) map[string]bool {
	m, _ := app.Metadata[fromFileKey].(map[string]bool)
	return m
}
