// Package doctorcmd is `signagent doctor`: every part of a configuration
// checked end to end, read-only, one line per check.
package doctorcmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

// Family is doctor, beside setup: the command that says whether what setup
// (or an operator) wrote works.
func Family(f *factory.Factory) cmdutil.Family {
	return cmdutil.Family{Category: "This program", Commands: []cmdutil.Command{
		// It reads the settings itself: a file it cannot read is a failed
		// check, not a refusal to start.
		{Command: command(f), Settings: cmdutil.NoSettings},
	}}
}

// The statuses of a check.
const (
	OK   = "ok"
	Warn = "warn"
	Fail = "fail"
)

// Check is one line of the report: what was checked, how it went, and
// what to do when it did not.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

func command(f *factory.Factory) *cli.Command {
	var flags []cli.Flag
	for _, fl := range factory.ServeFlags() {
		if n := cmdutil.FlagName(fl); n != "config" && n != "print-env" {
			flags = append(flags, fl)
		}
	}
	return &cli.Command{
		Name:  "doctor",
		Usage: "check the configuration end to end, changing nothing: files, addresses, clock, keys, token, store, sign-in",
		Description: "Checks the current context of the settings file (--config, --context), or with --agent-config an agent's\n" +
			"settings file as serve reads it, with the flags and SIGNAGENT_* variables over it: the secrets' files (their\n" +
			"modes and owners), each service address reached over TLS, this machine's clock against the service's Date\n" +
			"(warn past 5s, fail past 60s), the API key and the developer key asked of the service by calls that change\n" +
			"nothing, the PKCS#11 token without a login (the module, the token, its PIN flags, the key's certificate;\n" +
			"signagent token check signs), the shared store (it answers; its key opens the profile's record), and the\n" +
			"identity provider (discovery) and the profile's sign-in. Nothing is refreshed, logged in, registered or\n" +
			"written. One line per check: ok, warn or fail, with what to do. Exit 0 when no check fails, 1 when one\n" +
			"does, 2 for bad flags.\n\n" +
			cmdutil.Examples("signagent doctor", "signagent doctor --context prod --json",
				"signagent doctor --agent-config /etc/signagent/agent.yaml"),
		Flags: cmdutil.Concat([]cli.Flag{
			&cli.StringFlag{Name: "agent-config", Category: "Settings", Usage: "check the agent's settings `FILE` (serve --config) instead of the settings file's context"},
			cmdutil.JSONFlag(`[{"name","status","detail"}]`),
		}, cmdutil.SettingsFlags(true), flags, []cli.Flag{cmdutil.ProfileFlag()}, factory.MoreSchemeFlags()),
		Action: func(c *cli.Context) error { return runDoctor(c.Context, f, readDoctor(c)) },
	}
}

// doctorOptions are what doctor is told: which settings to check (the
// agent's file, or the settings file's context) and the form of the
// report. Load reads them: a file it cannot read is a failed check.
type doctorOptions struct {
	Agent bool
	JSON  bool
	// Load reads the settings to check, and says where they came from.
	Load func() (*settings.Settings, string, error)
}

// readDoctor reads doctor's flags.
func readDoctor(c *cli.Context) doctorOptions {
	return doctorOptions{Agent: c.IsSet("agent-config"), JSON: c.Bool("json"), Load: func() (*settings.Settings, string, error) { return load(c) }}
}

// runDoctor makes every check and reports; a failed one is exit 1.
func runDoctor(ctx context.Context, f *factory.Factory, o doctorOptions) error {
	e := f.Env
	s, from, err := o.Load()
	var checks []Check
	if err != nil {
		checks = []Check{{Name: "settings", Status: Fail, Detail: err.Error()}}
	} else {
		f.UseSettings(s) // the parts it checks are built from what it checks
		d := &run{s: s, e: e, f: f, agent: o.Agent, st: cmdutil.ReadStore(s), svc: cmdutil.ReadService(s), biz: cmdutil.ReadBusiness(s), oid: cmdutil.ReadOIDC(s)}
		d.timeout = d.svc.RequestTimeout
		if d.timeout <= 0 || d.timeout > 15*time.Second {
			d.timeout = 15 * time.Second
		}
		d.add("settings", OK, from)
		d.all(ctx)
		checks = d.checks
	}
	if o.JSON {
		err = cmdutil.WriteJSON(e, checks)
	} else {
		err = write(e.Stdout, checks)
	}
	if err != nil {
		return err
	}
	var failed []string
	for _, ch := range checks {
		if ch.Status == Fail {
			failed = append(failed, ch.Name)
		}
	}
	if len(failed) > 0 {
		return cmdutil.Exit(cmdutil.ExitFailure, fmt.Errorf("doctor: %d of %d checks failed: %s", len(failed), len(checks), strings.Join(failed, ", ")))
	}
	return nil
}

// load reads the settings to check: the agent's file (--agent-config) as
// serve reads its --config, else the settings file and its context.
func load(c *cli.Context) (*settings.Settings, string, error) {
	path, named := cmdutil.SettingsPath(c)
	what := "the settings file"
	if f := c.String("agent-config"); f != "" {
		path, named, what = f, true, "the agent's settings file"
	}
	s, err := settings.Load(c, path, cmdutil.ContextName(c), named, cmdutil.KnownKeys(c.App))
	if err != nil {
		return nil, "", err
	}
	if err := s.Err(); err != nil {
		return nil, "", err
	}
	from := fmt.Sprintf("%s %s", what, path)
	if name := cmdutil.ContextName(c); name != "" {
		from += ", context " + name
	}
	return s, from + ", with the flags and SIGNAGENT_* variables over it", nil
}

// write prints one line per check.
func write(w io.Writer, checks []Check) error {
	for _, ch := range checks {
		if _, err := fmt.Fprintf(w, "%-4s  %s: %s\n", ch.Status, ch.Name, ch.Detail); err != nil {
			return err
		}
	}
	return nil
}

// run is one doctor's checks as they are made.
type run struct {
	s     *settings.Settings
	e     *cmdutil.Env
	f     *factory.Factory // the run's, its settings s
	agent bool             // --agent-config: the agent's own files too
	// The shared flag sets of the settings checked.
	st      cmdutil.Store
	svc     cmdutil.Service
	biz     cmdutil.Business
	oid     cmdutil.OIDC
	timeout time.Duration // each network call
	checks  []Check
	// skew is the service's clock against this machine's, from the first
	// answer that carried a Date, and whose answer it was.
	skew     time.Duration
	skewFrom string
}

func (d *run) add(name, status, detail string) {
	d.checks = append(d.checks, Check{Name: name, Status: status, Detail: detail})
}

// result adds ok with detail when err is nil, else fail with err.
func (d *run) result(name string, err error, detail string) bool {
	if err != nil {
		d.add(name, Fail, oneLine(err))
		return false
	}
	d.add(name, OK, detail)
	return true
}

// all makes every check in the order a configuration is built: files,
// addresses, the clock, keys, the token, the store, the sign-in.
func (d *run) all(ctx context.Context) {
	keys := d.secrets()
	d.files()
	d.addresses(ctx)
	d.clock()
	d.serviceKeys(ctx, keys)
	d.token(ctx)
	d.oidc(ctx, d.store(ctx)) // the store is the factory's, closed when the run ends
}

func oneLine(err error) string {
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return strings.TrimPrefix(msg, "signagent: ")
}
