package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
)

func serveCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the local agent: signatures, sessions and links for partner systems over a Unix socket or loopback HTTP",
		Description: "Settings come from flags, then SIGNAGENT_* variables, then the --config file, then defaults.\n" +
			"SIGTERM or SIGINT stops it gracefully; SIGHUP reloads the configuration and reopens the token; SIGUSR1 reopens the audit log only.\n\n" +
			cmdutil.Examples("signagent serve",
				"signagent serve --print-env",
				"signagent serve --listen unix:/run/user/1000/signagent/agent.sock --listen tcp:127.0.0.1:8700 --bearer-token-file token",
				"signagent serve --config /etc/signagent/agent.yaml --store redis://redis.example:6379 --store-key-file store.key",
				"signagent serve --metrics-listen 127.0.0.1:9464",
				"systemctl --user enable --now signagent.socket"),
		Flags:  cmdutil.Concat(factory.ServeFlags(), factory.MoreSchemeFlags()),
		Action: func(c *cli.Context) error { return runServe(c.Context, f, readServe(c)) },
	}
}

// serveOptions are what serve is told beyond the agent's settings, which
// it loads itself (Load), at the start and again on each SIGHUP: whether
// to print the environment once serving, and the log level when the
// settings name none.
type serveOptions struct {
	PrintEnv bool
	LogLevel string
	// Load reads the settings: flags, environment, the --config file
	// (read anew each time) and defaults.
	Load func() (*settings.Settings, error)
}

// readServe reads serve's own flags and where its settings are.
func readServe(c *cli.Context) serveOptions {
	path, named := cmdutil.SettingsPath(c)
	context, known := cmdutil.ContextName(c), cmdutil.KnownKeys(c.App)
	return serveOptions{PrintEnv: c.Bool("print-env"), LogLevel: cmdutil.LogLevel(c, "serve"),
		Load: func() (*settings.Settings, error) { return settings.Load(c, path, context, named, known) }}
}

// agentSettings loads the settings and the logger they name, and reads the
// agent's configuration from them.
func agentSettings(f *factory.Factory, o serveOptions) (agent.Config, error) {
	e := f.Env
	s, err := o.Load()
	if err != nil {
		return agent.Config{}, cmdutil.UsageErr(err)
	}
	// The log settings may come from the file: apply them before anything
	// logs. The agent logs at info unless told otherwise.
	level, format := cmdutil.ReadLog(s)
	if level == "" {
		level = o.LogLevel
	}
	if e.Log, err = cmdutil.NewLogger(e.Stderr, level, format); err != nil {
		return agent.Config{}, err
	}
	cfg, err := f.AgentConfig(s)
	return cfg, configError(err)
}

// runServe runs the agent until SIGTERM or SIGINT (or a part fails),
// reloading its settings on SIGHUP.
func runServe(parent context.Context, f *factory.Factory, o serveOptions) error {
	e := f.Env
	// SIGHUP is caught from the start: its default action would kill an
	// agent that is still starting. One that comes early is applied once
	// serving begins.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// SIGUSR1 reopens the audit log only (logrotate's postrotate).
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	cfg, err := agentSettings(f, o)
	if err != nil {
		return err
	}
	if err := checkListen(cfg.Listen); err != nil {
		return err
	}
	TuneGC(cfg.ServiceBodyBudget)
	if cfg.Inherited, err = activation.Listeners(); err != nil {
		return fmt.Errorf("could not take the sockets systemd passed: %w", err)
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := agent.Start(ctx, cfg)
	if err != nil && ctx.Err() != nil && parent.Err() == nil {
		// SIGTERM or SIGINT while starting: a stop, not a failure.
		e.Log.Info().Msg("stopped while starting")
		return nil
	}
	if err != nil {
		return configError(err)
	}
	ev := e.Log.Info().Strs("listen", d.Addrs())
	if m := d.MetricsAddr(); m != "" {
		ev = ev.Str("metrics", m)
	}
	ev.Bool("ready", d.Ready()).Msg("agent serving")
	if o.PrintEnv {
		printEnv(e, d.Addrs())
	}
	daemon.SdNotify(false, daemon.SdNotifyReady)
	for {
		select {
		case <-hup:
			daemon.SdNotify(false, daemon.SdNotifyReloading)
			reload(f, o, d, cfg.Inherited)
			daemon.SdNotify(false, daemon.SdNotifyReady)
			continue
		case <-usr1:
			if err := d.ReopenAudit(); err != nil {
				e.Log.Error().Err(err).Msg("could not reopen the audit log; still writing to the old one")
			} else {
				e.Log.Info().Msg("audit log reopened")
			}
			continue
		case <-ctx.Done():
		case err = <-d.Failed():
		}
		daemon.SdNotify(false, daemon.SdNotifyStopping)
		shut, cancel := context.WithTimeout(context.Background(), d.Grace())
		d.Shutdown(shut)
		cancel()
		e.Log.Info().Msg("agent stopped")
		return err
	}
}

// checkListen refuses a Unix socket directly in / or with no directory
// at all: what unix:$XDG_RUNTIME_DIR/signagent.sock becomes when the
// variable is unset (a login without a systemd user session, su, a
// container). Refused rather than warned about: a socket at / is never
// what was meant, a warning scrolls past in a daemon's log while the
// partner systems look for the socket elsewhere, and one line at start
// names the cause.
func checkListen(listen []string) error {
	for _, l := range listen {
		path, ok := strings.CutPrefix(l, "unix:")
		if !ok {
			continue
		}
		dir := filepath.Dir(path)
		if dir == "/" || dir == "." {
			return cmdutil.UsageErr(fmt.Errorf("--listen %s: a socket directly in / or with no directory (is $XDG_RUNTIME_DIR unset?); give a directory of its own, e.g. unix:/run/user/%d/signagent/agent.sock", l, os.Getuid()))
		}
		// unix:$XDG_RUNTIME_DIR/signagent/agent.sock with the variable
		// unset is /signagent/agent.sock: the agent would make /signagent,
		// and put the bearer token beside the socket there.
		if _, err := os.Lstat(dir); filepath.Dir(dir) == "/" && errors.Is(err, fs.ErrNotExist) {
			return cmdutil.UsageErr(fmt.Errorf("--listen %s: its directory %s would be made directly under / (is $XDG_RUNTIME_DIR unset? it is %q here); give a directory that exists or one below it, e.g. unix:/run/user/%d/signagent/agent.sock",
				l, dir, os.Getenv("XDG_RUNTIME_DIR"), os.Getuid()))
		}
	}
	return nil
}

// printEnv prints the lines that point the CLI at this agent, in the
// Bourne shell's syntax as ssh-agent -s prints them, and closes stdout so
// that eval "$(signagent serve --print-env &)" returns.
func printEnv(e *cmdutil.Env, addrs []string) {
	for _, a := range addrs {
		if path, ok := strings.CutPrefix(a, "unix:"); ok {
			q := "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
			fmt.Fprintf(e.Stdout, "%s=%s; export %s;\nSIGNAGENT_AGENT_PID=%d; export SIGNAGENT_AGENT_PID;\n", agentclient.SocketEnv, q, agentclient.SocketEnv, os.Getpid())
			break
		}
	}
	if f, ok := e.Stdout.(*os.File); ok {
		if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
			unix.Dup2(int(null.Fd()), int(f.Fd()))
			null.Close()
		}
	}
}

// reload reads the settings again and hands them to the daemon; a failure
// keeps the running configuration.
func reload(f *factory.Factory, o serveOptions, d *agent.Daemon, inherited []net.Listener) {
	e := f.Env
	cfg, err := agentSettings(f, o)
	if err == nil {
		cfg.Inherited = inherited
		err = d.Reload(cfg)
		if c, ok := cfg.SharedStore.(io.Closer); ok && err != nil {
			c.Close() // opened for this configuration, which is not used
		}
	}
	if err != nil {
		e.Log.Error().Err(err).Msg("reload failed; keeping the running configuration")
		return
	}
	e.Log.Info().Msg("configuration reloaded")
}

// ServeGCPercent is the agent's garbage collector target (GOGC) unless
// GOGC or GOMEMLIMIT is set: its live heap is a few megabytes, which at
// Go's default of 100 had the collector run some hundred times a second
// under proxy load (issue 26's profile); 400 lets the heap grow to five
// times what is live between collections, tens of megabytes.
const ServeGCPercent = 400

// TuneGC sets serveGCPercent, with a soft memory limit of twice the
// proxied bodies the agent may hold (budget) plus 64 MiB: a heap that
// grows toward it is collected as often as Go's default would, so the
// higher target never lets the worst case (every held body in memory)
// take more than the default would have.
func TuneGC(budget int64) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(ServeGCPercent)
	if budget <= 0 {
		budget = agent.DefaultServiceBodyBudget
	}
	debug.SetMemoryLimit(2*budget + 64<<20)
}

// configError gives the errors of the agent's configuration (its
// settings, or what agent.Start finds wrong in them: agent.ErrConfig) the
// bad-input exit status.
func configError(err error) error {
	if errors.Is(err, agent.ErrConfig) {
		return cmdutil.UsageErr(err)
	}
	return err
}
