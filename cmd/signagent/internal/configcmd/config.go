package configcmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
)

func configCommand(e *cmdutil.Env) *cli.Command {
	return &cli.Command{
		Name:  "config",
		Args:  true, // checked by the command itself (its subcommands, or its own arguments)
		Usage: "view and change the settings file and its contexts (like kubectl config)",
		Description: "The settings file (--config, SIGNAGENT_CONFIG, else $XDG_CONFIG_HOME/signagent/config.yaml) holds\n" +
			"every command's settings, keyed by the flags' names, at the top (every context) or in a\n" +
			"context (contexts: {NAME: {...}}, chosen by --context, SIGNAGENT_CONTEXT or current-context).\n" +
			"A flag or variable beats the file. It never holds a secret: name the secret's file\n" +
			"(pin-file, api-key-file, client-secret-file, ...). It is written atomically, mode 0600.\n\n" +
			cmdutil.Examples("signagent config set --context staging business-url https://api.staging.example",
				"signagent config use-context staging", "signagent config get business-url", "signagent config contexts"),
		Subcommands: []*cli.Command{
			{Name: "view", Usage: "print the settings file", Flags: cmdutil.SettingsFlags(true), Action: configAction(e, 0, "", configView)},
			{Name: "get", Usage: "print a setting's value in the file, for the chosen context", ArgsUsage: "KEY", Flags: cmdutil.SettingsFlags(true),
				Action: configAction(e, 1, "KEY", configGet)},
			{Name: "set", Usage: "set a setting for every context (the top of the file), or with --context NAME in that context, made if new", ArgsUsage: "KEY VALUE", Flags: cmdutil.SettingsFlags(true),
				Action: configAction(e, 2, "KEY VALUE", configSet)},
			{Name: "unset", Usage: "remove a setting from the top of the file, or with --context NAME from that context", ArgsUsage: "KEY", Flags: cmdutil.SettingsFlags(true),
				Action: configAction(e, 1, "KEY", configUnset)},
			cmdutil.ArgValues(&cli.Command{Name: "use-context", Usage: "make a context the current one", ArgsUsage: "NAME", Flags: cmdutil.SettingsFlags(true),
				Action: configAction(e, 1, "NAME", configUseContext)}, cmdutil.ContextNames),
			{Name: "contexts", Usage: "list the contexts, * marking the current one", Flags: cmdutil.SettingsFlags(true),
				Action: configAction(e, 0, "", configContexts)},
		},
	}
}

// configOptions are what a config subcommand is told: its positional
// arguments, the settings file (--config or SIGNAGENT_CONFIG, named: it
// must be there; else the default one) and the context --context names.
type configOptions struct {
	Args    []string
	Path    string
	Named   bool
	Context string
	// Known says whether a key is a setting (a flag's name); Flag is the
	// flag a key names, in any command (nil for none).
	Known func(string) bool
	Flag  func(string) cli.Flag
}

// readConfig reads a config subcommand's flags and its n positional
// arguments (usage names them).
func readConfig(c *cli.Context, n int, usage string) (configOptions, error) {
	if c.NArg() != n {
		return configOptions{}, cmdutil.UsageErr(fmt.Errorf("usage: signagent config %s %s", c.Command.Name, usage))
	}
	path, named := cmdutil.SettingsPath(c)
	return configOptions{Args: c.Args().Slice(), Path: path, Named: named, Context: cmdutil.ContextName(c),
		Known: cmdutil.KnownKeys(c.App), Flag: func(key string) cli.Flag { return flagOf(c.App, key) }}, nil
}

// configAction is a config subcommand's action: readConfig, then run.
func configAction(e *cmdutil.Env, n int, usage string, run func(*cmdutil.Env, configOptions) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		o, err := readConfig(c, n, usage)
		if err != nil {
			return err
		}
		return run(e, o)
	}
}

// readSettingsFile reads the file for a config subcommand (all of it
// checked) and its path.
func readSettingsFile(o configOptions) (*settings.File, error) {
	return readSettingsFor(o, o.Context)
}

// readSettingsFor reads the file for a config subcommand with context
// chosen ("" for the file's current one).
func readSettingsFor(o configOptions, context string) (*settings.File, error) {
	if o.Path == "" {
		return nil, cmdutil.UsageErr(errors.New("no settings file: give --config FILE (there is no home directory)"))
	}
	f, err := settings.ReadFile(o.Path, context, o.Named, o.Known)
	if err != nil {
		return nil, cmdutil.UsageErr(err)
	}
	return f, nil
}

func configView(e *cmdutil.Env, o configOptions) error {
	f, err := readSettingsFile(o)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(e.Stderr, "%s: no settings yet (signagent config set KEY VALUE writes it)\n", f.Path)
		return nil
	}
	if err != nil {
		return err
	}
	_, err = e.Stdout.Write(b)
	return err
}

func configGet(e *cmdutil.Env, o configOptions) error {
	a := o.Args
	a[0] = cmdutil.NewKey(e.Stderr, a[0])
	if !o.Known(a[0]) {
		return cmdutil.UsageErr(fmt.Errorf("unknown setting %q: the keys are the flags' names without the dashes", a[0]))
	}
	f, err := readSettingsFile(o)
	if err != nil {
		return err
	}
	v, ok := f.Value(a[0])
	if !ok {
		where := f.Path
		if f.Context != "" {
			where += ", context " + f.Context
		}
		return fmt.Errorf("%s is not set in %s", a[0], where)
	}
	switch x := v.(type) {
	case []any:
		for _, i := range x {
			fmt.Fprintln(e.Stdout, i)
		}
	default:
		fmt.Fprintln(e.Stdout, x)
	}
	return nil
}

// flagOf finds the flag a key names, in any command.
func flagOf(app *cli.App, key string) cli.Flag {
	var found cli.Flag
	var walk func(cmds []*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				if found == nil && slices.Contains(cmdutil.FlagNames(f), key) {
					found = f
				}
			}
			walk(c.Subcommands)
		}
	}
	walk(app.Commands)
	return found
}

// checkValue parses value as the flag key would: a duration for a
// duration, a number for a number.
func checkValue(fl cli.Flag, key, value string) (*yaml.Node, error) {
	set := flag.NewFlagSet(key, flag.ContinueOnError)
	set.SetOutput(io.Discard)
	if err := fl.Apply(set); err != nil {
		return nil, err
	}
	if err := set.Set(key, value); err != nil {
		return nil, cmdutil.UsageErr(fmt.Errorf("%s: want %s, not %q", key, cmdutil.WantOf(fl), value))
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: value, Tag: "!!str"}
	switch fl.(type) {
	case *cli.BoolFlag:
		n.Tag = "!!bool"
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag:
		n.Tag = "!!int"
	}
	if cmdutil.IsListFlag(fl) {
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		for _, p := range strings.Split(value, ",") {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: strings.TrimSpace(p), Tag: "!!str"})
		}
		return seq, nil
	}
	return n, nil
}

func configSet(e *cmdutil.Env, o configOptions) error { return setOrUnset(e, o, false) }

func configUnset(e *cmdutil.Env, o configOptions) error { return setOrUnset(e, o, true) }

// setOrUnset sets the key of o's arguments to its value, or with unset
// removes it.
func setOrUnset(e *cmdutil.Env, o configOptions, unset bool) error {
	a := o.Args
	var err error
	key := cmdutil.NewKey(e.Stderr, a[0])
	if file, secret := settings.SecretKeys[key]; secret {
		return cmdutil.UsageErr(fmt.Errorf("%q is a secret, which the settings file never holds: keep it in a file only you can read and set %s to that file's path", key, file))
	}
	fl := o.Flag(key)
	if fl == nil || !o.Known(key) {
		return cmdutil.UsageErr(fmt.Errorf("unknown setting %q: the keys are the flags' names without the dashes (signagent COMMAND --help lists them)", key))
	}
	var value *yaml.Node
	if !unset {
		if value, err = checkValue(fl, key, a[1]); err != nil {
			return err
		}
	}
	// set makes the context it names; unset needs it there.
	f, err := readSettingsFor(o, "")
	if err != nil {
		return err
	}
	f.Context = "" // the top of the file, for every context, unless one is named
	if name := o.Context; name != "" {
		if unset && !slices.Contains(f.Contexts, name) {
			return cmdutil.UsageErr(fmt.Errorf("no context %q in %s (contexts: %s)", name, f.Path, strings.Join(f.Contexts, ", ")))
		}
		f.Context = name
	}
	doc, err := settings.EditDoc(f.Path)
	if err != nil {
		return err
	}
	m := doc.Content[0]
	if f.Context != "" {
		m = settings.Mapping(settings.Mapping(m, "contexts"), f.Context)
	}
	// A renamed key's old spelling goes with it: set writes the new one
	// alone, unset removes either.
	removedOld := settings.Remove(m, settings.OldName(key))
	if unset {
		if !settings.Remove(m, key) && !removedOld {
			return fmt.Errorf("%s is not set there", key)
		}
	} else {
		settings.Put(m, key, value)
	}
	if err := settings.WriteDoc(f.Path, doc); err != nil {
		return err
	}
	where := "every context"
	if f.Context != "" {
		where = "context " + f.Context
	}
	e.Log.Info().Str("file", f.Path).Str("key", key).Str("where", where).Msg("settings written")
	return nil
}

func configUseContext(e *cmdutil.Env, o configOptions) error {
	a := o.Args
	f, err := readSettingsFile(o)
	if err != nil {
		return err
	}
	if !slices.Contains(f.Contexts, a[0]) {
		return cmdutil.UsageErr(fmt.Errorf("no context %q in %s (contexts: %s); make one with signagent config set --context %s KEY VALUE", a[0], f.Path, strings.Join(f.Contexts, ", "), a[0]))
	}
	doc, err := settings.EditDoc(f.Path)
	if err != nil {
		return err
	}
	settings.Put(doc.Content[0], "current-context", &yaml.Node{Kind: yaml.ScalarNode, Value: a[0], Tag: "!!str"})
	if err := settings.WriteDoc(f.Path, doc); err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "current context: %s\n", a[0])
	return nil
}

func configContexts(e *cmdutil.Env, o configOptions) error {
	f, err := readSettingsFile(o)
	if err != nil {
		return err
	}
	for _, n := range f.Contexts {
		mark := " "
		if n == f.Current {
			mark = "*"
		}
		fmt.Fprintf(e.Stdout, "%s %s\n", mark, n)
	}
	return nil
}
