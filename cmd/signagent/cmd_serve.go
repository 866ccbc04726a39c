package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/softhsm"
	"github.com/signagent/signagent/trusted"
)

const catAgent = "Agent"

// defaultSocket is $XDG_RUNTIME_DIR/signagent/agent.sock for a user, and
// /run/signagent/agent.sock for root or a system service.
func defaultSocket() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && os.Getuid() != 0 {
		return filepath.Join(d, "signagent", "agent.sock")
	}
	return "/run/signagent/agent.sock"
}

func serveFlags() []cli.Flag {
	return concat([]cli.Flag{
		&cli.StringFlag{Name: "config", Category: catAgent, EnvVars: []string{"SIGNAGENT_CONFIG"}, Usage: "YAML `FILE` of settings, keyed by flag name; reloaded on SIGHUP"},
		&cli.StringSliceFlag{Name: "listen", Category: catAgent, EnvVars: []string{"SIGNAGENT_LISTEN"}, Usage: "unix:PATH or tcp:HOST:PORT, repeatable (default unix:" + defaultSocket() + ")"},
		&cli.StringFlag{Name: "socket-group", Category: catAgent, EnvVars: []string{"SIGNAGENT_SOCKET_GROUP"}, Usage: "`GROUP` (name or gid) owning the socket, made mode 0660 instead of 0600"},
		&cli.StringSliceFlag{Name: "allow-uid", Category: catAgent, EnvVars: []string{"SIGNAGENT_ALLOW_UID"}, Usage: "only these `UID`s may call over the Unix socket (SO_PEERCRED), repeatable"},
		&cli.StringSliceFlag{Name: "allow-gid", Category: catAgent, EnvVars: []string{"SIGNAGENT_ALLOW_GID"}, Usage: "only callers with these primary `GID`s, repeatable"},
		&cli.StringFlag{Name: "bearer-token-file", Category: catAgent, EnvVars: []string{"SIGNAGENT_BEARER_TOKEN_FILE"}, Usage: "`FILE` holding the TCP callers' bearer token; created (0600, random) when absent (default: beside the socket)"},
		&cli.StringFlag{Name: "tls-cert", Category: catAgent, EnvVars: []string{"SIGNAGENT_TLS_CERT"}, Usage: "TLS certificate `FILE` for TCP listeners (needed beyond loopback)"},
		&cli.StringFlag{Name: "tls-key", Category: catAgent, EnvVars: []string{"SIGNAGENT_TLS_KEY"}, Usage: "TLS key `FILE`"},
		&cli.StringFlag{Name: "tls-client-ca", Category: catAgent, EnvVars: []string{"SIGNAGENT_TLS_CLIENT_CA"}, Usage: "require client certificates issued by this CA `FILE`"},
		&cli.IntFlag{Name: "token-concurrency", Category: catAgent, Value: 1, EnvVars: []string{"SIGNAGENT_TOKEN_CONCURRENCY"}, Usage: "token operations at once (a smart card signs one at a time)"},
		&cli.IntFlag{Name: "queue-size", Category: catAgent, Value: 64, EnvVars: []string{"SIGNAGENT_QUEUE_SIZE"}, Usage: "requests that may wait for the token; more get 429 at once"},
		&cli.DurationFlag{Name: "token-delay", Category: catAgent, EnvVars: []string{"SIGNAGENT_TOKEN_DELAY"}, Usage: "slow-card mode: add this to every signature (benchmarks, tests)"},
		&cli.DurationFlag{Name: "session-ttl", Category: catAgent, Value: 12 * time.Hour, EnvVars: []string{"SIGNAGENT_SESSION_TTL"}, Usage: "serve a cached auth.sid this long (the service's own lifetime is 30 days)"},
		&cli.DurationFlag{Name: "request-deadline", Category: catAgent, Value: 30 * time.Second, EnvVars: []string{"SIGNAGENT_REQUEST_DEADLINE"}, Usage: "limit for one API request, waiting for the token included"},
		&cli.IntFlag{Name: "max-body", Category: catAgent, Value: 64 << 10, EnvVars: []string{"SIGNAGENT_MAX_BODY"}, Usage: "largest request body in bytes"},
		&cli.DurationFlag{Name: "shutdown-grace", Category: catAgent, Value: 10 * time.Second, EnvVars: []string{"SIGNAGENT_SHUTDOWN_GRACE"}, Usage: "on SIGTERM, time for requests in flight to finish"},
		&cli.BoolFlag{Name: "expose-canonical", Category: catAgent, EnvVars: []string{"SIGNAGENT_EXPOSE_CANONICAL"}, Usage: "return the signed text (it holds the API key) in /v1/signatures answers"},
		&cli.StringSliceFlag{Name: "routes", Category: catAgent, EnvVars: []string{"SIGNAGENT_ROUTES"}, Usage: "open routes per caller class, repeatable: `CLASS=ROUTES` with CLASS uid:N, gid:N, unix, tcp or default and ROUTES from signatures,sessions,links (default: all routes to every admitted caller)"},
		&cli.StringFlag{Name: "audit-log", Category: catAgent, Value: "-", EnvVars: []string{"SIGNAGENT_AUDIT_LOG"}, Usage: "audit `FILE` (JSON lines, mode 0600, appended), or - for stderr"},
	}, tokenFlags(), signFlags(), serviceFlags()[:5], []cli.Flag{
		&cli.BoolFlag{Name: "legacy-snils", Category: catCredential, EnvVars: []string{"SIGNAGENT_LEGACY_SNILS"}, Usage: "accept SNILS numbers whose check number does not follow the rule"},
	})
}

func serveCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the local agent: signatures, sessions and links for partner systems over a Unix socket or loopback HTTP",
		Description: "Settings come from flags, then SIGNAGENT_* variables, then the --config file, then defaults.\n" +
			"SIGTERM or SIGINT stops it gracefully; SIGHUP reloads the configuration and reopens the token.",
		Flags: serveFlags(),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			return serve(c, e)
		},
	}
}

// agentConfig is what serve reads from its settings; reload reads it again.
type agentConfig struct {
	sel         pkcs11.Selection
	sigOpts     signer.Options
	apiKey      string
	service     *trusted.Config // nil without --base-url; Signer is set by serve
	allowUIDs   []int
	allowGIDs   []int
	sessionTTL  time.Duration
	workers     int
	queue       int
	delay       time.Duration
	deadline    time.Duration
	maxBody     int
	grace       time.Duration
	legacySNILS bool
	// exposeCanonical returns the signed text (with the API key) to callers.
	exposeCanonical bool
	routes          []agent.RouteRule
}

// readAgentConfig reads the agent's settings from s (flags, environment and
// the configuration file, already loaded).
func readAgentConfig(s *settings, e *env) (*agentConfig, error) {
	var err error
	var er errs
	cfg := &agentConfig{}
	cfg.sel, err = selectionFrom(s, false)
	er.check(err)
	h, err := signer.HashFromName(s.String("hash"))
	er.check(err)
	noAttrs, err := s.Bool("no-signed-attributes")
	er.check(err)
	cfg.sigOpts = signer.Options{Hash: h, NoSignedAttributes: noAttrs}
	if f := s.String("chain"); f != "" {
		cfg.sigOpts.Chain, err = readCerts(f)
		er.check(err)
	}
	cfg.allowUIDs, err = s.Ints("allow-uid")
	er.check(err)
	cfg.allowGIDs, err = s.Ints("allow-gid")
	er.check(err)
	cfg.sessionTTL, err = s.Duration("session-ttl")
	er.check(err)
	cfg.workers, err = s.Int("token-concurrency")
	er.check(err)
	cfg.queue, err = s.Int("queue-size")
	er.check(err)
	cfg.delay, err = s.Duration("token-delay")
	er.check(err)
	cfg.deadline, err = s.Duration("request-deadline")
	er.check(err)
	cfg.maxBody, err = s.Int("max-body")
	er.check(err)
	cfg.grace, err = s.Duration("shutdown-grace")
	er.check(err)
	cfg.legacySNILS, err = s.Bool("legacy-snils")
	er.check(err)
	cfg.exposeCanonical, err = s.Bool("expose-canonical")
	er.check(err)
	routes, err := s.Strings("routes")
	er.check(err)
	for _, r := range routes {
		rule, err := agent.ParseRouteRule(r)
		if err != nil {
			er.check(usageErr(err))
			continue
		}
		cfg.routes = append(cfg.routes, rule)
	}
	if er.err != nil {
		return nil, er.err
	}
	if cfg.workers < 1 || cfg.queue < 1 || cfg.maxBody < 1 || cfg.deadline <= 0 || cfg.sessionTTL <= 0 {
		return nil, usageErr(errors.New("token-concurrency, queue-size, max-body, request-deadline and session-ttl must be positive"))
	}
	// The API key: needed for signatures and sessions alike.
	if cfg.apiKey, err = apiKeyFrom(s); err != nil {
		return nil, err
	}
	if base := s.String("base-url"); base != "" {
		insecure, err := s.Bool("insecure-http")
		if err != nil {
			return nil, err
		}
		timeout, err := s.Duration("request-timeout")
		if err != nil {
			return nil, err
		}
		attempts, err := s.Int("attempts")
		if err != nil {
			return nil, err
		}
		cfg.service = &trusted.Config{BaseURL: base, AllowInsecureHTTP: insecure, APIKey: cfg.apiKey,
			Timeout: timeout, Attempts: attempts, UserAgent: "signagent/" + version, Log: e.log}
		// Check the address now, so that a bad one fails at start-up.
		if _, err := trusted.New(*cfg.service); err != nil {
			return nil, err
		}
	} else {
		e.log.Warn().Msg("no --base-url: /v1/sessions and /v1/links answer 503 until one is configured")
	}
	return cfg, nil
}

// bearerToken reads the bearer token file, creating it with a random token
// (mode 0600) when it does not exist.
func bearerToken(path string, e *env) (string, error) {
	b, err := pkcs11.ReadSecretFile(path, 4096)
	if errors.Is(err, os.ErrNotExist) {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return "", err
		}
		tok := hex.EncodeToString(raw)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", err
		}
		if err := softhsm.WriteFileAtomic(path, []byte(tok+"\n"), 0o600); err != nil {
			return "", err
		}
		e.log.Info().Str("file", path).Msg("created a bearer token for TCP callers")
		return tok, nil
	}
	if err != nil {
		return "", usageErr(fmt.Errorf("the bearer token file: %w", err))
	}
	tok := string(trimSpace(b))
	if len(tok) < 16 {
		return "", usageErr(fmt.Errorf("the bearer token in %s is shorter than 16 characters", path))
	}
	return tok, nil
}

func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return 0, usageErr(fmt.Errorf("--socket-group %q: %w", g, err))
	}
	return strconv.Atoi(gr.Gid)
}

func serve(c *cli.Context, e *env) error {
	// SIGHUP is caught from the start: its default action would kill an
	// agent that is still starting. One that comes early is applied once
	// serving begins.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	s, err := loadSettings(c, c.String("config"))
	if err != nil {
		return err
	}
	// The log settings may come from the file: apply them before anything logs.
	if e.log, err = newLogger(e.stderr, s.String("log-level"), s.String("log-format")); err != nil {
		return err
	}
	cfg, err := readAgentConfig(s, e)
	if err != nil {
		return err
	}
	var audit io.Writer = e.stderr
	var auditFile *agent.AuditFile
	if f := s.String("audit-log"); f == os.DevNull {
		audit = io.Discard
	} else if f != "-" && f != "" {
		if auditFile, err = agent.OpenAuditFile(f); err != nil {
			return usageErr(err)
		}
		defer auditFile.Close()
		audit = auditFile
	}

	// Listeners first, so that a bad address fails before the token is
	// touched; then the token; then serving.
	peer := agent.NewPeerAuth(cfg.allowUIDs, cfg.allowGIDs)
	var bearer *agent.BearerAuth
	tlsCfg, err := agent.TLSFiles{Cert: s.String("tls-cert"), Key: s.String("tls-key"), ClientCA: s.String("tls-client-ca")}.Config()
	if err != nil {
		return usageErr(err)
	}
	var listeners []agent.Listener
	closeAll := func() {
		for _, l := range listeners {
			l.Close()
			if l.Path != "" {
				os.Remove(l.Path)
			}
		}
	}
	specs, err := s.Strings("listen")
	if err != nil {
		return err
	}
	activated, err := activation.Listeners()
	if err != nil {
		return fmt.Errorf("could not take the sockets systemd passed: %w", err)
	}
	if len(specs) == 0 && len(activated) == 0 {
		specs = []string{"unix:" + defaultSocket()}
	}
	bearerFile := s.String("bearer-token-file")
	needBearer := func() (*agent.BearerAuth, error) {
		if bearer != nil {
			return bearer, nil
		}
		if bearerFile == "" {
			bearerFile = filepath.Join(filepath.Dir(defaultSocket()), "bearer-token")
		}
		tok, err := bearerToken(bearerFile, e)
		if err != nil {
			return nil, err
		}
		bearer = agent.NewBearerAuth(tok)
		return bearer, nil
	}
	for _, l := range activated {
		if l == nil {
			continue
		}
		if _, ok := l.(*net.UnixListener); ok {
			listeners = append(listeners, agent.Listener{Listener: l, Auth: peer})
			continue
		}
		b, err := needBearer()
		if err != nil {
			closeAll()
			return err
		}
		listeners = append(listeners, agent.Listener{Listener: l, Auth: b})
	}
	for _, spec := range specs {
		network, addr, err := agent.ParseListen(spec)
		if err != nil {
			closeAll()
			return usageErr(err)
		}
		switch network {
		case "unix":
			us := agent.UnixSocket{Path: addr}
			if g := s.String("socket-group"); g != "" {
				if us.Group, err = lookupGroup(g); err != nil {
					closeAll()
					return err
				}
				us.HasGroup = true
			}
			l, err := agent.ListenUnix(us)
			if err != nil {
				closeAll()
				return err
			}
			listeners = append(listeners, agent.Listener{Listener: l, Auth: peer, Path: addr})
		case "tcp":
			l, err := agent.ListenTCP(addr, tlsCfg)
			if err != nil {
				closeAll()
				if errors.Is(err, agent.ErrInsecureListen) {
					return usageErr(err)
				}
				return err
			}
			listeners = append(listeners, agent.Listener{Listener: l})
			b, err := needBearer()
			if err != nil {
				closeAll()
				return err
			}
			listeners[len(listeners)-1].Auth = b
		}
	}

	var a *agent.Agent
	open := func(sel pkcs11.Selection) agent.Opener {
		return func(ctx context.Context) (agent.Token, error) { return pkcs11.Open(ctx, sel, e.log) }
	}
	probeCtx, cancelProbe := context.WithTimeout(c.Context, cfg.sel.Timeout)
	err = probe(probeCtx, cfg.sel)
	cancelProbe()
	if err != nil {
		closeAll()
		return err
	}
	tm, err := agent.NewTokenManager(agent.TokenOptions{
		ID:          selectionID(cfg.sel),
		OpenTimeout: cfg.sel.Timeout,
		Open:        open(cfg.sel), Signature: cfg.sigOpts, Workers: cfg.workers, Backlog: cfg.queue, Delay: cfg.delay, Log: e.log,
		OnSign: func(d time.Duration, err error) {
			if a != nil {
				a.ObserveSign(d, err)
			}
		},
	})
	if err != nil {
		closeAll()
		return err
	}
	defer tm.Close()
	client, err := serviceClient(cfg, tm)
	if err != nil {
		return err
	}
	a = agent.New(agent.Options{Token: tm, Client: client, APIKey: cfg.apiKey, Log: e.log, Audit: agent.NewAudit(audit),
		SessionTTL: cfg.sessionTTL, RequestDeadline: cfg.deadline, MaxBody: int64(cfg.maxBody), LegacySNILS: cfg.legacySNILS,
		ExposeCanonical: cfg.exposeCanonical, Routes: cfg.routes})

	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				daemon.SdNotify(false, daemon.SdNotifyReloading)
				if auditFile != nil {
					if err := auditFile.Reopen(); err != nil {
						e.log.Error().Err(err).Msg("could not reopen the audit log; still writing to the old one")
					}
				}
				if err := reload(c, e, a, tm, peer, bearer, bearerFile, open); err != nil {
					e.log.Error().Err(err).Msg("reload failed; keeping the running configuration")
				} else {
					e.log.Info().Msg("configuration reloaded")
				}
				daemon.SdNotify(false, daemon.SdNotifyReady)
			}
		}
	}()

	addrs := make([]string, len(listeners))
	for i, l := range listeners {
		addrs[i] = l.Addr().Network() + ":" + l.Addr().String()
	}
	st := tm.State()
	e.log.Info().Strs("listen", addrs).Bool("tokenReady", st.Ready).Msg("agent serving")
	daemon.SdNotify(false, daemon.SdNotifyReady)
	err = a.Serve(ctx, listeners, cfg.grace)
	daemon.SdNotify(false, daemon.SdNotifyStopping)
	e.log.Info().Msg("agent stopped")
	return err
}

// serviceClient is the trusted client the agent runs sessions and links
// with, signing through the token manager's queue; nil without a base URL.
func serviceClient(cfg *agentConfig, tm *agent.TokenManager) (*trusted.Client, error) {
	if cfg.service == nil {
		return nil, nil
	}
	sc := *cfg.service
	sc.Signer = tm
	return trusted.New(sc)
}

// selectionID names a token selection, so that a reload that does not
// change it does not reopen the token.
func selectionID(sel pkcs11.Selection) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%#v", sel)))
	return hex.EncodeToString(sum[:])
}

// reload reads the configuration again and applies what can change while
// running: caller allow-lists, the bearer token, the service address and API
// key, the session lifetime, and the token selection (the token is reopened,
// which also retries a PIN the token refused).
func reload(c *cli.Context, e *env, a *agent.Agent, tm *agent.TokenManager, peer *agent.PeerAuth,
	bearer *agent.BearerAuth, bearerFile string, open func(pkcs11.Selection) agent.Opener) error {
	s, err := loadSettings(c, c.String("config"))
	if err != nil {
		return err
	}
	cfg, err := readAgentConfig(s, e)
	if err != nil {
		return err
	}
	peer.Set(cfg.allowUIDs, cfg.allowGIDs)
	if bearer != nil {
		tok, err := bearerToken(bearerFile, e)
		if err != nil {
			return err
		}
		bearer.Set(tok)
	}
	client, err := serviceClient(cfg, tm)
	if err != nil {
		return err
	}
	a.SetService(cfg.apiKey, client)
	a.SetSessionTTL(cfg.sessionTTL)
	a.SetRouteRules(cfg.routes)
	if err := tm.Reopen(open(cfg.sel), selectionID(cfg.sel)); err != nil {
		e.log.Warn().Err(err).Msg("the token did not reopen")
	}
	return nil
}
