package benchcmd

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/bench"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/uri"
	"github.com/signagent/signagent/safefile"
)

// newApp is signagent-bench: its flags and action measure the token, CMS
// signing and the agent (bench.Suite, bench.Soak); bench proxy measures
// the agent's proxy; upstream and floor are the processes bench proxy
// starts.
func newApp(e *cmdutil.Env) *cli.App {
	return &cli.App{
		Name:  "signagent-bench",
		Usage: "measure the token, CMS signing and the agent over its socket, in one run, with ratios against the raw token rate",
		Description: "Without --socket it starts its own emulator and `signagent serve` (the signagent beside this program,\n" +
			"else the one in $PATH) on a temporary socket, and also\n" +
			"reports the agent's start-up time and resident memory. With --socket it drives an agent already running.\n" +
			"It also times what people use instead: one `openssl cms -sign` (PKCS#11 engine) and one `pkcs11-tool --sign`\n" +
			"process per signature. --soak drives /v1/signatures for --duration and reports the agent's memory and\n" +
			"goroutines at the start and the end.",
		Flags: cmdutil.Concat(cmdutil.TokenFlags(), cmdutil.APIKeyFlags(), []cli.Flag{
			&cli.DurationFlag{Name: "each", Value: 3 * time.Second, Usage: "`DURATION` each row runs"},
			&cli.BoolFlag{Name: "soak", Usage: "soak mode: drive /v1/signatures for --duration at --soak-concurrency"},
			cmdutil.JSONFlag(`{"rows":[{"name","concurrency","opsPerSec","vsRaw","p50us","p99us","p999us","errors","value","note"}],...}`),
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Minute, Usage: "soak mode: for `DURATION`"},
			&cli.IntFlag{Name: "soak-concurrency", Value: 8, Usage: "soak mode: `N` callers"},
			&cli.BoolFlag{Name: "no-tools", Usage: "skip the openssl and pkcs11-tool rows"},
			&cli.StringFlag{Name: "concurrency", Value: "1,2,8,32", Usage: "comma-separated caller concurrencies `N,N,...` for /v1/signatures"},
			&cli.IntFlag{Name: "workers", Value: runtime.GOMAXPROCS(0), DefaultText: "the number of CPUs", Usage: "`N` token workers: the agent's --token-concurrency and the raw rate's N"},
			&cli.StringFlag{Name: "ec-key-label", Usage: "also measure the raw rate of the P-256 key `LABEL`"},
			&cli.StringFlag{Name: "gost-key", Usage: "also measure the raw and CMS rates of the GOST key this pkcs11: `URI` names (with its module-path and pin-source)"},
			&cli.DurationFlag{Name: "token-delay", Usage: "slow-card mode: add `DURATION` to every token signature (raw and agent alike)"},
			&cli.IntFlag{Name: "queue-size", Value: 1024, Usage: "the started agent's --queue-size `N`"},
			&cli.StringFlag{Name: "socket", Usage: "drive the agent already serving on this Unix `SOCKET` instead of starting one"},
			&cli.IntFlag{Name: "agent-pid", Usage: "with --socket: the agent's `PID`, to report its resident memory"},
			// Hidden, as bench proxy's: a developer's flag
			// (docs/BENCHMARKS.md), for a change measured before and after
			// in one run.
			&cli.StringFlag{Name: "baseline-agent", Hidden: true, Usage: "also start the agent of the signagent `BINARY` (an earlier build) on the same token and measure its /v1/signatures in the same rounds, as row \"baseline /v1/signatures\""},
			&cli.IntFlag{Name: "rounds", Value: 5, Hidden: true, Usage: "with --baseline-agent: `N` interleaved rounds per /v1/signatures row"},
		}),
		Action: func(c *cli.Context) error {
			return runBench(c, e)
		},
		Commands: []*cli.Command{benchProxyCommand(e), benchUpstreamCommand(), benchFloorCommand()},
	}
}

// benchUpstreamCommand is the business API bench proxy measures against,
// in a process of its own (hidden: bench proxy starts it).
func benchUpstreamCommand() *cli.Command {
	return &cli.Command{
		Name:   "upstream",
		Hidden: true,
		Usage:  "serve bench proxy's minimal business API on a loopback address until SIGTERM",
		Flags:  []cli.Flag{&cli.StringFlag{Name: "listen", Required: true, Usage: "loopback `HOST:PORT`"}},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return bench.ServeUpstream(ctx, c.String("listen"))
		},
	}
}

// benchFloorCommand is the Go floor bench proxy measures the agent's
// proxy against: the least a proxy on Go's HTTP server does for the same
// call, in a process of its own (hidden: bench proxy starts it).
func benchFloorCommand() *cli.Command {
	return &cli.Command{
		Name:   "floor",
		Hidden: true,
		Usage:  "serve bench proxy's Go floor (a bare net/http proxy) on a loopback address until SIGTERM",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Required: true, Usage: "loopback `HOST:PORT`"},
			&cli.StringFlag{Name: "upstream", Required: true, Usage: "the business API's loopback `HOST:PORT`"},
			&cli.StringFlag{Name: "bearer-token-file", Required: true, Usage: "the callers' bearer token from `FILE`"},
		},
		Action: func(c *cli.Context) error {
			b, err := safefile.ReadSecret(c.String("bearer-token-file"), 4096, 0)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return bench.ServeFloor(ctx, c.String("listen"), c.String("upstream"), strings.TrimSpace(string(b)))
		},
	}
}

// benchProxyCommand is `signagent-bench proxy`: the agent's proxy against
// nginx in one run (bench.Proxy).
func benchProxyCommand(e *cmdutil.Env) *cli.Command {
	return &cli.Command{
		Name:  "proxy",
		Usage: "measure the agent's proxy against nginx, the direct call, a cached authorization and /readyz, in one interleaved run",
		Description: "Starts a minimal business API in a process of its own (as a real one is), `signagent serve` (an OpenID\n" +
			"Connect profile whose header is cached, over a Unix socket and loopback TCP with a bearer token) and Debian's nginx\n" +
			"as the header-injecting proxy an operator would write (bearer check, fixed Authorization header, upstream\n" +
			"keepalive pool, buffered access log; skipped with a message when absent) and the Go floor (the least a proxy on Go's\n" +
			"HTTP server does for the call: no agent work), then prints p50 and p99 of each at each concurrency, the CPU per\n" +
			"call of the agent, the floor and nginx, and the ratios.\n\n" +
			cmdutil.Examples("signagent-bench proxy", "signagent-bench proxy --each 10s --concurrency 1,8 --json"),
		Flags: cmdutil.Concat([]cli.Flag{
			&cli.DurationFlag{Name: "each", Value: 5 * time.Second, Usage: "`DURATION` each row runs, spread over --rounds"},
			&cli.IntFlag{Name: "rounds", Value: 5, Usage: "`N` interleaved rounds per row"},
			&cli.StringFlag{Name: "concurrency", Value: "1,8", Usage: "comma-separated caller concurrencies `N,N,...`"},
			// Hidden: a developer's flag (docs/BENCHMARKS.md), for a change
			// measured before and after in one run.
			&cli.StringFlag{Name: "baseline-agent", Hidden: true, Usage: "also measure the agent of the signagent `BINARY` (an earlier build) in the same rounds, as row \"baseline tcp\""},
			cmdutil.JSONFlag(`{"rows":[...],"ratios":[{"name","value"}]}`),
		}, cmdutil.LogFlags("Logging")),
		Action: func(c *cli.Context) error {
			conc, err := bench.ParseConcurrency(c.String("concurrency"))
			if err != nil {
				return cmdutil.UsageErr(err)
			}
			if c.Int("rounds") < 1 || c.Duration("each") <= 0 {
				return cmdutil.UsageErr(errors.New("--rounds and --each must be positive"))
			}
			exe, agent, err := binaries()
			if err != nil {
				return err
			}
			baseline, err := baselineAgent(c.String("baseline-agent"))
			if err != nil {
				return cmdutil.UsageErr(fmt.Errorf("--baseline-agent: %w", err))
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			err = bench.Proxy(ctx, bench.ProxyOptions{Executable: agent, Helper: exe, Baseline: baseline, Each: c.Duration("each"), Rounds: c.Int("rounds"),
				Concurrency: conc, JSON: c.Bool("json"), Version: cmdutil.CurrentBuild().Version, Stdout: e.Stdout, Stderr: e.Stderr})
			if ctx.Err() != nil && c.Context.Err() == nil {
				return cmdutil.Exit(cmdutil.ExitInterrupted, errors.New("benchmark interrupted"))
			}
			return err
		},
	}
}

// binaries are this program (exe: the helper processes are it again) and
// the signagent it starts as the agent (agentBinary).
func binaries() (exe, agent string, err error) {
	if exe, err = os.Executable(); err != nil {
		return "", "", err
	}
	agent, err = agentBinary(exe)
	return exe, agent, err
}

// agentBinary is the signagent the benchmark starts as the agent: the one
// beside self (make build puts both in bin/), else the one in $PATH.
func agentBinary(self string) (string, error) {
	beside := filepath.Join(filepath.Dir(self), "signagent")
	if st, err := os.Stat(beside); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return beside, nil
	}
	path, err := exec.LookPath("signagent")
	if err != nil {
		return "", errors.New("no signagent to start as the agent: signagent-bench runs the signagent beside it, else the one in $PATH")
	}
	return filepath.Abs(path)
}

// baselineAgent is --baseline-agent (bench's and bench proxy's) as an absolute path to
// an executable file (a name without a slash is looked up in $PATH), ""
// when not given.
func baselineAgent(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	return filepath.Abs(path)
}

func runBench(c *cli.Context, e *cmdutil.Env) error {
	if err := cmdutil.NoArgs(c); err != nil { // checked here: the parent of proxy, upstream and floor
		return err
	}
	// The settings file gives the token flags not given (read here: proxy,
	// upstream and floor need none).
	if err := cmdutil.LoadSettings(c); err != nil {
		return err
	}
	conc, err := bench.ParseConcurrency(c.String("concurrency"))
	if err != nil {
		return cmdutil.UsageErr(err)
	}
	baseline, err := baselineAgent(c.String("baseline-agent"))
	if err != nil {
		return cmdutil.UsageErr(fmt.Errorf("--baseline-agent: %w", err))
	}
	if baseline != "" {
		switch {
		case c.Bool("soak") || c.String("socket") != "":
			return cmdutil.UsageErr(errors.New("--baseline-agent measures /v1/signatures of two agents this run starts: not with --soak or --socket"))
		case c.Int("rounds") < 1:
			return cmdutil.UsageErr(errors.New("--rounds must be positive"))
		}
	}
	sel, err := cmdutil.Selection(c)
	if err != nil {
		return err
	}
	key, err := benchAPIKey(c)
	if err != nil {
		return err
	}
	_, agent, err := binaries()
	if err != nil {
		return err
	}
	var gost pkcs11.Selection
	if v := c.String("gost-key"); v != "" {
		// The GOST key is on a module of its own, named in its URI: that
		// module, not the main key's ($SIGNAGENT_PKCS11_MODULE, --module).
		u, err := uri.Parse(v)
		if err != nil {
			return cmdutil.UsageErr(fmt.Errorf("--gost-key: %w", err))
		}
		if u.ModulePath == "" {
			return cmdutil.UsageErr(errors.New("--gost-key: the URI must name its module (module-path=)"))
		}
		gost = pkcs11.Selection{URI: v, Module: u.ModulePath}
	}
	o := bench.Options{Token: sel, ECKeyLabel: c.String("ec-key-label"), GOSTKey: gost, PINFile: c.String("pin-file"), APIKey: key,
		Each: c.Duration("each"), Concurrency: conc, Workers: c.Int("workers"), TokenDelay: c.Duration("token-delay"),
		QueueSize: c.Int("queue-size"), NoTools: c.Bool("no-tools"), Socket: c.String("socket"), AgentPID: c.Int("agent-pid"),
		Executable: agent, Baseline: baseline, Rounds: c.Int("rounds"), Duration: c.Duration("duration"), SoakCallers: c.Int("soak-concurrency"),
		Version: cmdutil.Version, Stdout: e.Stdout, Stderr: e.Stderr, JSON: c.Bool("json")}
	for _, f := range []string{"module", "token-label", "token-serial", "key", "key-label", "key-id", "certificate-file"} {
		if v := c.String(f); v != "" && c.IsSet(f) {
			o.ServeArgs = append(o.ServeArgs, "--"+f, v)
		}
	}
	// SIGTERM or Ctrl-C ends the run and the agent it started.
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.Bool("soak") {
		err = bench.Soak(ctx, o)
	} else {
		err = bench.Suite(ctx, o)
	}
	if ctx.Err() != nil && c.Context.Err() == nil {
		return errors.New("benchmark interrupted")
	}
	return err
}

// benchAPIKey is the configured API key (--api-key-file,
// SIGNAGENT_API_KEY_FILE, SIGNAGENT_API_KEY), or a throw-away one when none
// is configured: the bench talks to its own emulator. A configured key
// that cannot be read is an error, not replaced.
func benchAPIKey(c *cli.Context) (string, error) {
	k, err := cmdutil.APIKey(c)
	if err == nil {
		return k, nil
	}
	if cmdutil.APIKeySpec.Source(settings.Of(c)).Given() {
		return "", cmdutil.UsageErr(err)
	}
	b := make([]byte, 16)
	rand.Read(b)
	return canonical.NormalizeAPIKey(hex.EncodeToString(b))
}
