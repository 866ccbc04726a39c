package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/internal/settings"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/trusted"
)

const catAgent = "Agent"

func serveFlags() []cli.Flag {
	return concat([]cli.Flag{
		&cli.StringFlag{Name: "config", Category: catAgent, EnvVars: []string{"SIGNAGENT_CONFIG"}, Usage: "YAML `FILE` of settings, keyed by flag name; reloaded on SIGHUP"},
		&cli.BoolFlag{Name: "print-env", Category: catAgent, Usage: "once serving, print SIGNAGENT_AGENT_SOCK=PATH; export SIGNAGENT_AGENT_SOCK; on stdout and close it, as ssh-agent -s does: eval \"$(signagent serve --print-env &)\""},
		&cli.StringSliceFlag{Name: "listen", Category: catAgent, EnvVars: []string{"SIGNAGENT_LISTEN"}, Usage: "`ADDRESS`: unix:PATH or tcp:HOST:PORT, repeatable (default unix:$XDG_RUNTIME_DIR/signagent/agent.sock, for root unix:/run/signagent/agent.sock)"},
		&cli.StringFlag{Name: "socket-group", Category: catAgent, EnvVars: []string{"SIGNAGENT_SOCKET_GROUP"}, Usage: "`GROUP` (name or gid) owning the socket, made mode 0660 instead of 0600"},
		&cli.StringSliceFlag{Name: "allow-uid", Category: catAgent, EnvVars: []string{"SIGNAGENT_ALLOW_UID"}, Usage: "only these `UID`s may call over the Unix socket (SO_PEERCRED), repeatable"},
		&cli.StringSliceFlag{Name: "allow-gid", Category: catAgent, EnvVars: []string{"SIGNAGENT_ALLOW_GID"}, Usage: "only callers with these primary `GID`s, repeatable"},
		&cli.StringFlag{Name: "bearer-token-file", Category: catAgent, EnvVars: []string{"SIGNAGENT_BEARER_TOKEN_FILE"}, Usage: "`FILE` holding the TCP callers' bearer token; created (0600, random) when absent (default: beside the socket)"},
		&cli.StringFlag{Name: "tls-cert", Category: catAgent, EnvVars: []string{"SIGNAGENT_TLS_CERT"}, Usage: "TLS certificate `FILE` for TCP listeners (needed beyond loopback)"},
		&cli.StringFlag{Name: "tls-key", Category: catAgent, EnvVars: []string{"SIGNAGENT_TLS_KEY"}, Usage: "TLS key `FILE`"},
		&cli.StringFlag{Name: "tls-client-ca", Category: catAgent, EnvVars: []string{"SIGNAGENT_TLS_CLIENT_CA"}, Usage: "require client certificates issued by this CA `FILE`"},
		&cli.IntFlag{Name: "token-concurrency", Category: catAgent, Value: 1, EnvVars: []string{"SIGNAGENT_TOKEN_CONCURRENCY"}, Usage: "`N` token operations at once (a smart card signs one at a time)"},
		&cli.IntFlag{Name: "queue-size", Category: catAgent, Value: 64, EnvVars: []string{"SIGNAGENT_QUEUE_SIZE"}, Usage: "`N` requests that may wait for the token; more get 429 at once"},
		&cli.DurationFlag{Name: "token-delay", Category: catAgent, EnvVars: []string{"SIGNAGENT_TOKEN_DELAY"}, Usage: "slow-card mode: add `DURATION` to every signature (benchmarks, tests)"},
		&cli.DurationFlag{Name: "session-ttl", Category: catAgent, Value: 12 * time.Hour, EnvVars: []string{"SIGNAGENT_SESSION_TTL"}, Usage: "serve a cached auth.sid for `DURATION` (the service's own lifetime is 30 days)"},
		&cli.DurationFlag{Name: "request-deadline", Category: catAgent, Value: 30 * time.Second, EnvVars: []string{"SIGNAGENT_REQUEST_DEADLINE"}, Usage: "`DURATION` limit for one API request, waiting for the token included"},
		&cli.IntFlag{Name: "max-body", Category: catAgent, Value: 64 << 10, EnvVars: []string{"SIGNAGENT_MAX_BODY"}, Usage: "largest request body in `BYTES`"},
		&cli.IntFlag{Name: "service-max-body", Category: catAgent, Value: 16 << 20, EnvVars: []string{"SIGNAGENT_SERVICE_MAX_BODY"}, Usage: "largest body in `BYTES` of a business call through the proxy (/v1/service/...); held in memory for the retry"},
		&cli.IntFlag{Name: "service-body-budget", Category: catAgent, Value: agent.DefaultServiceBodyBudget, EnvVars: []string{"SIGNAGENT_SERVICE_BODY_BUDGET"}, Usage: "most `BYTES` of proxied bodies held at once, in memory or spooled to unlinked temporary files (bodies over 256 KiB); a call past it is answered 503 at once"},
		&cli.DurationFlag{Name: "shutdown-grace", Category: catAgent, Value: 10 * time.Second, EnvVars: []string{"SIGNAGENT_SHUTDOWN_GRACE"}, Usage: "on SIGTERM, `DURATION` for requests in flight to finish"},
		&cli.BoolFlag{Name: "expose-canonical", Category: catAgent, EnvVars: []string{"SIGNAGENT_EXPOSE_CANONICAL"}, Usage: "return the signed text (it holds the API key) in /v1/signatures answers"},
		&cli.BoolFlag{Name: "expose-legacy-header", Category: catAgent, EnvVars: []string{"SIGNAGENT_EXPOSE_LEGACY_HEADER"}, Usage: "hand out legacy ServiceAuth header values in /v1/authorizations answers (they hold the developer key; the proxy never shows them)"},
		&cli.BoolFlag{Name: "certificate-login", Category: catAgent, Value: true, EnvVars: []string{"SIGNAGENT_CERTIFICATE_LOGIN"}, Usage: "allow legacy certificate login (the token decrypts the service's challenge); --certificate-login=false turns it off"},
		&cli.StringSliceFlag{Name: "routes", Category: catAgent, EnvVars: []string{"SIGNAGENT_ROUTES"}, Usage: "open routes per caller class, repeatable: `CLASS=ROUTES` with CLASS uid:N, gid:N, unix, tcp or default and ROUTES from " + strings.Join(agent.RouteNames, ",") + " (default: all routes to every admitted caller)"},
		&cli.StringFlag{Name: "audit-log", Category: catAgent, Value: "-", EnvVars: []string{"SIGNAGENT_AUDIT_LOG"}, Usage: "audit `FILE` (JSON lines, mode 0600, appended), or - for stderr"},
	}, tokenFlags(), signFlags(), serviceFlags(), legacyServiceFlags(), []cli.Flag{
		&cli.BoolFlag{Name: "legacy-snils", Category: catCredential, EnvVars: []string{"SIGNAGENT_LEGACY_SNILS"}, Usage: "accept SNILS numbers whose check number does not follow the rule"},
		&cli.StringSliceFlag{Name: "legacy-password-file", Category: catLegacy, EnvVars: []string{"SIGNAGENT_LEGACY_PASSWORD_FILE"}, Usage: "an account the agent may log in as by password, repeatable: `LOGIN=FILE` (the file holds the password)"},
	}, oidcAgentFlags())
}

func serveCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the local agent: signatures, sessions and links for partner systems over a Unix socket or loopback HTTP",
		Description: "Settings come from flags, then SIGNAGENT_* variables, then the --config file, then defaults.\n" +
			"SIGTERM or SIGINT stops it gracefully; SIGHUP reloads the configuration and reopens the token; SIGUSR1 reopens the audit log only.",
		Flags: concat(serveFlags(), moreSchemeFlags()),
		Action: func(c *cli.Context) error {
			return serve(c, e)
		},
	}
}

// readAgentConfig reads the agent's settings from s (flags, environment and
// the configuration file, already loaded).
func readAgentConfig(s *settings.Settings, e *env) (agent.Config, error) {
	cfg := agent.Config{Version: currentBuild().Version, Log: e.log, Stderr: e.stderr, Probe: pkcs11.ProbeSelection,
		Listen: s.Strings("listen"), SocketGroup: s.String("socket-group"), AllowUIDs: s.Ints("allow-uid"), AllowGIDs: s.Ints("allow-gid"),
		BearerTokenFile: s.String("bearer-token-file"), AuditLog: s.String("audit-log"),
		TLS:              agent.TLSFiles{Cert: s.String("tls-cert"), Key: s.String("tls-key"), ClientCA: s.String("tls-client-ca")},
		TokenConcurrency: s.Int("token-concurrency"), QueueSize: s.Int("queue-size"), TokenDelay: s.Duration("token-delay"),
		SessionTTL: s.Duration("session-ttl"), RequestDeadline: s.Duration("request-deadline"), MaxBody: int64(s.Int("max-body")),
		ShutdownGrace: s.Duration("shutdown-grace"), LegacySNILS: s.Bool("legacy-snils"),
		Policy: agent.Policy{ExposeCanonical: s.Bool("expose-canonical"), ExposeLegacyHeader: s.Bool("expose-legacy-header"), NoCertificateLogin: !s.Bool("certificate-login")},
		APIURL: s.String("api-url"), AllowInsecureAPI: s.Bool("insecure-http"), ServiceMaxBody: int64(s.Int("service-max-body")),
		ServiceBodyBudget: int64(s.Int("service-body-budget"))}
	var errs [9]error // all are reported, not only the first (and the store's)
	cfg.Token, errs[0] = selectionFrom(s, false)
	cfg.Signature, errs[1] = signatureOptions(s)
	cfg.Routes, errs[2] = agent.ParseRouteRules(s.Strings("routes"))
	// Each part is needed only by the schemes that use it: the token and
	// the API key by signatures and trusted sessions (and certificate
	// logins), which an agent for OpenID Connect or legacy passwords alone
	// does without.
	cfg.NoToken = !signingWanted(s)
	if !cfg.NoToken {
		cfg.APIKey, errs[3] = apiKeyFrom(s) // needed for signatures and sessions alike
	}
	errs[7] = oidcSettingsComplete(s)
	if cfg.NoToken && !hasDeveloperKey(s) && s.String("auth-url") == "" && s.String("client-id") == "" {
		errs[8] = usageErr(errors.New("nothing to serve: give the partner API key (SIGNAGENT_API_KEY or --api-key-file) and a token for signatures and sessions, " +
			"--api-url with a developer key for the legacy scheme, or --auth-url and --client-id for OpenID Connect"))
	}
	if s.String("base-url") != "" {
		cfg.Service, errs[4] = serviceConfig(s, e, cfg.APIKey)
	}
	switch {
	case s.String("api-url") == "":
		e.log.Info().Msg("no --api-url: legacy authorizations and the business proxy answer 503 until one is configured")
	case !hasDeveloperKey(s):
		// The proxy serves OpenID Connect profiles without it.
		e.log.Warn().Msg("no developer key (SIGNAGENT_DEVELOPER_KEY or --developer-key-file): the legacy and trusted schemes answer 503")
	default:
		cfg.Legacy, cfg.LegacyPasswords, errs[5] = legacyAgentConfig(s, e)
	}
	// The shared store, opened once: OpenID Connect records, trusted
	// sessions and legacy tokens are all kept there.
	shared, serr := openStore(s)
	if shared != nil {
		cfg.SharedStore = shared
	}
	cfg.OIDC, errs[6] = oidcAgentConfig(s, e, shared)
	cfg.Schemes = moreSchemes(s, e)
	err := agentErr(settings.Join(append(append(errs[:], serr), s.Err())...))
	if err != nil && shared != nil {
		shared.Close()
	}
	return cfg, err
}

// signingWanted says whether the agent signs: an API key, --base-url or a
// token named in any way (module, URI, token or key) asks for it.
func signingWanted(s *settings.Settings) bool {
	if apiKeySecret.source(s).Given() || os.Getenv(pkcs11.ModuleEnv) != "" {
		return true
	}
	for _, name := range []string{"base-url", "module", "key", "token-label", "token-serial", "key-label", "key-id"} {
		if s.String(name) != "" {
			return true
		}
	}
	return false
}

// oidcSettingsComplete says, in one error, what OpenID Connect still
// needs when one of its settings is given.
func oidcSettingsComplete(s *settings.Settings) error {
	given := map[string]bool{"--auth-url (SIGNAGENT_AUTH_URL)": s.String("auth-url") != "", "--client-id (SIGNAGENT_CLIENT_ID)": s.String("client-id") != "",
		"the client secret (SIGNAGENT_CLIENT_SECRET or --client-secret-file)": clientSecretSecret.source(s).Given()}
	var missing []string
	some := false
	for name, ok := range given {
		some = some || ok
		if !ok {
			missing = append(missing, name)
		}
	}
	if !some || len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	return usageErr(fmt.Errorf("OpenID Connect is half configured: give %s too", strings.Join(missing, " and ")))
}

// signatureOptions are the CMS options: --hash, --no-signed-attributes,
// --chain.
func signatureOptions(s *settings.Settings) (signer.Options, error) {
	h, err := signer.HashFromName(s.String("hash"))
	if err != nil {
		return signer.Options{}, err
	}
	o := signer.Options{Hash: h, NoSignedAttributes: s.Bool("no-signed-attributes")}
	if f := s.String("chain"); f != "" {
		o.Chain, err = readCerts(f)
	}
	return o, err
}

// serviceConfig is the trusted service's settings.
func serviceConfig(s *settings.Settings, e *env, apiKey string) (*trusted.Config, error) {
	if s.String("base-url") == "" {
		return nil, usageErr(errors.New("give the service's address with --base-url or SIGNAGENT_BASE_URL"))
	}
	if s.Int("attempts") < 1 {
		return nil, usageErr(errors.New("--attempts must be at least 1"))
	}
	return &trusted.Config{BaseURL: s.String("base-url"), AllowInsecureHTTP: s.Bool("insecure-http"), APIKey: apiKey,
		Timeout: s.Duration("request-timeout"), Attempts: s.Int("attempts"), UserAgent: "signagent/" + Version, Log: e.log}, s.Err()
}

// agentSettings loads the settings and the logger they name, and reads the
// agent's configuration from them.
func agentSettings(c *cli.Context, e *env) (agent.Config, error) {
	path, named := settingsPath(c)
	s, err := settings.Load(c, path, contextName(c), named, knownKeys(c.App))
	if err != nil {
		return agent.Config{}, usageErr(err)
	}
	// The log settings may come from the file: apply them before anything
	// logs. The agent logs at info unless told otherwise.
	level := s.String("log-level")
	if level == "" {
		level = logLevel(c, "serve")
	}
	if e.log, err = newLogger(e.stderr, level, s.String("log-format")); err != nil {
		return agent.Config{}, err
	}
	return readAgentConfig(s, e)
}

// agentErr gives configuration errors the bad-input exit status.
func agentErr(err error) error {
	if errors.Is(err, agent.ErrConfig) {
		return usageErr(err)
	}
	return err
}

func serve(c *cli.Context, e *env) error {
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
	cfg, err := agentSettings(c, e)
	if err != nil {
		return err
	}
	tuneGC(cfg.ServiceBodyBudget)
	if cfg.Inherited, err = activation.Listeners(); err != nil {
		return fmt.Errorf("could not take the sockets systemd passed: %w", err)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := agent.Start(ctx, cfg)
	if err != nil && ctx.Err() != nil && c.Context.Err() == nil {
		// SIGTERM or SIGINT while starting: a stop, not a failure.
		e.log.Info().Msg("stopped while starting")
		return nil
	}
	if err != nil {
		return agentErr(err)
	}
	e.log.Info().Strs("listen", d.Addrs()).Bool("ready", d.Ready()).Msg("agent serving")
	if c.Bool("print-env") {
		printEnv(e, d.Addrs())
	}
	daemon.SdNotify(false, daemon.SdNotifyReady)
	for {
		select {
		case <-hup:
			daemon.SdNotify(false, daemon.SdNotifyReloading)
			reload(c, e, d, cfg.Inherited)
			daemon.SdNotify(false, daemon.SdNotifyReady)
			continue
		case <-usr1:
			if err := d.ReopenAudit(); err != nil {
				e.log.Error().Err(err).Msg("could not reopen the audit log; still writing to the old one")
			} else {
				e.log.Info().Msg("audit log reopened")
			}
			continue
		case <-ctx.Done():
		case err = <-d.Failed():
		}
		daemon.SdNotify(false, daemon.SdNotifyStopping)
		shut, cancel := context.WithTimeout(context.Background(), d.Grace())
		d.Shutdown(shut)
		cancel()
		e.log.Info().Msg("agent stopped")
		return err
	}
}

// printEnv prints the lines that point the CLI at this agent, in the
// Bourne shell's syntax as ssh-agent -s prints them, and closes stdout so
// that eval "$(signagent serve --print-env &)" returns.
func printEnv(e *env, addrs []string) {
	for _, a := range addrs {
		if path, ok := strings.CutPrefix(a, "unix:"); ok {
			q := "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
			fmt.Fprintf(e.stdout, "%s=%s; export %s;\nSIGNAGENT_AGENT_PID=%d; export SIGNAGENT_AGENT_PID;\n", agentclient.SocketEnv, q, agentclient.SocketEnv, os.Getpid())
			break
		}
	}
	if f, ok := e.stdout.(*os.File); ok {
		if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
			unix.Dup2(int(null.Fd()), int(f.Fd()))
			null.Close()
		}
	}
}

// reload reads the settings again and hands them to the daemon; a failure
// keeps the running configuration.
func reload(c *cli.Context, e *env, d *agent.Daemon, inherited []net.Listener) {
	cfg, err := agentSettings(c, e)
	if err == nil {
		cfg.Inherited = inherited
		err = d.Reload(cfg)
		if c, ok := cfg.SharedStore.(io.Closer); ok && err != nil {
			c.Close() // opened for this configuration, which is not used
		}
	}
	if err != nil {
		e.log.Error().Err(err).Msg("reload failed; keeping the running configuration")
		return
	}
	e.log.Info().Msg("configuration reloaded")
}

// serveGCPercent is the agent's garbage collector target (GOGC) unless
// GOGC or GOMEMLIMIT is set: its live heap is a few megabytes, which at
// Go's default of 100 had the collector run some hundred times a second
// under proxy load (issue 26's profile); 400 lets the heap grow to five
// times what is live between collections, tens of megabytes.
const serveGCPercent = 400

// tuneGC sets serveGCPercent, with a soft memory limit of twice the
// proxied bodies the agent may hold (budget) plus 64 MiB: a heap that
// grows toward it is collected as often as Go's default would, so the
// higher target never lets the worst case (every held body in memory)
// take more than the default would have.
func tuneGC(budget int64) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(serveGCPercent)
	if budget <= 0 {
		budget = agent.DefaultServiceBodyBudget
	}
	debug.SetMemoryLimit(2*budget + 64<<20)
}
