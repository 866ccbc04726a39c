package factory

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agent/access"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/probe"
	"github.com/signagent/signagent/signer"
)

const catAgent = "Agent"

// ServeFlags are the agent's settings, every scheme's included: serve
// takes them, and doctor checks a file of them.
func ServeFlags() []cli.Flag {
	return cmdutil.Concat([]cli.Flag{
		&cli.StringFlag{Name: "config", Category: catAgent, EnvVars: []string{"SIGNAGENT_CONFIG"}, Usage: "YAML `FILE` of settings, keyed by flag name; reloaded on SIGHUP"},
		&cli.BoolFlag{Name: "print-env", Category: catAgent, Usage: "once serving, print SIGNAGENT_AGENT_SOCK=PATH; export SIGNAGENT_AGENT_SOCK; on stdout and close it, as ssh-agent -s does: eval \"$(signagent serve --print-env &)\""},
		&cli.StringSliceFlag{Name: "listen", Category: catAgent, EnvVars: []string{"SIGNAGENT_LISTEN"}, Usage: "`ADDRESS`: unix:PATH or tcp:HOST:PORT, repeatable (default unix:$XDG_RUNTIME_DIR/signagent/agent.sock, for root unix:/run/signagent/agent.sock)"},
		&cli.StringFlag{Name: "metrics-listen", Category: catAgent, EnvVars: []string{"SIGNAGENT_METRICS_LISTEN"}, Usage: "also serve /metrics, /livez and /readyz alone on TCP `HOST:PORT`, without the bearer token (TLS with --tls-cert; beyond loopback only with it): for a Prometheus that must not hold the callers' token"},
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
		&cli.IntFlag{Name: "service-max-header-fields", Category: catAgent, Value: httpx.DefaultHeadFields, EnvVars: []string{"SIGNAGENT_SERVICE_MAX_HEADER_FIELDS"}, Usage: "most header fields, `N`, of a business API answer's head through the proxy; past it the call is answered 502 (a field costs about 400 bytes to hold); at most " + strconv.Itoa(agent.MaxServiceHeaderFields) + ", what the agent's own client reads"},
		&cli.IntFlag{Name: "service-max-header-bytes", Category: catAgent, Value: httpx.DefaultHeadBytes, EnvVars: []string{"SIGNAGENT_SERVICE_MAX_HEADER_BYTES"}, Usage: "largest head in `BYTES` of a business API answer through the proxy; past it the call is answered 502; at most " + strconv.Itoa(agent.MaxServiceHeaderBytes)},
		&cli.DurationFlag{Name: "shutdown-grace", Category: catAgent, Value: 10 * time.Second, EnvVars: []string{"SIGNAGENT_SHUTDOWN_GRACE"}, Usage: "on SIGTERM, `DURATION` for requests in flight to finish"},
		&cli.BoolFlag{Name: "expose-canonical", Category: catAgent, EnvVars: []string{"SIGNAGENT_EXPOSE_CANONICAL"}, Usage: "return the signed text (it holds the API key) in /v1/signatures answers"},
		&cli.BoolFlag{Name: "expose-legacy-header", Category: catAgent, EnvVars: []string{"SIGNAGENT_EXPOSE_LEGACY_HEADER"}, Usage: "hand out legacy ServiceAuth header values in /v1/authorizations answers (they hold the developer key; the proxy never shows them)"},
		&cli.BoolFlag{Name: "certificate-login", Category: catAgent, Value: true, EnvVars: []string{"SIGNAGENT_CERTIFICATE_LOGIN"}, Usage: "allow legacy certificate login (the token decrypts the service's challenge); --certificate-login=false turns it off"},
		&cli.StringSliceFlag{Name: "routes", Category: catAgent, EnvVars: []string{"SIGNAGENT_ROUTES"}, Usage: "open routes per caller class, repeatable: `CLASS=ROUTES` with CLASS uid:N, gid:N, unix, tcp or default and ROUTES from " + strings.Join(access.RouteNames, ",") + " (default: all routes to every admitted caller)"},
		&cli.StringFlag{Name: "audit-log", Category: catAgent, Value: "-", EnvVars: []string{"SIGNAGENT_AUDIT_LOG"}, Usage: "audit `FILE` (JSON lines, mode 0600, appended), or - for stderr"},
	}, cmdutil.TokenFlags(), SignFlags(), cmdutil.ServiceFlags(), cmdutil.BusinessFlags(), []cli.Flag{
		&cli.BoolFlag{Name: "legacy-snils", Category: cmdutil.CatCredential, EnvVars: []string{"SIGNAGENT_LEGACY_SNILS"}, Usage: "accept SNILS numbers whose check number does not follow the rule"},
		&cli.StringSliceFlag{Name: "legacy-password-file", Category: cmdutil.CatLegacy, EnvVars: []string{"SIGNAGENT_LEGACY_PASSWORD_FILE"}, Usage: "an account the agent may log in as by password, repeatable: `LOGIN=FILE` (the file holds the password)"},
		&cli.DurationFlag{Name: "refresh-token-lifetime", Category: cmdutil.CatOIDC, Value: oidc.DefaultRefreshLifetime, EnvVars: []string{"SIGNAGENT_REFRESH_TOKEN_LIFETIME"}, Usage: "how long the identity provider's refresh tokens last (`DURATION`; its token answers do not say): signagent_oidc_refresh_expiry_timestamp_seconds adds it to a refresh token's issue"},
	}, cmdutil.OIDCFlags())
}

// AgentConfig reads the agent's settings from s (flags, environment and
// the configuration file, already loaded: serve reads it again on each
// reload, so it is built anew each time, not kept). What it opens (the
// shared store) is the agent's to close.
func (f *Factory) AgentConfig(s *settings.Settings) (agent.Config, error) {
	e := f.Env
	build := cmdutil.CurrentBuild()
	svc, biz, oid := cmdutil.ReadService(s), cmdutil.ReadBusiness(s), cmdutil.ReadOIDC(s)
	cfg := agent.Config{Version: build.Version, Commit: build.Commit, MetricsListen: s.String("metrics-listen"), Log: e.Log, Stderr: e.Stderr, Probe: probe.Selection,
		Listen: s.Strings("listen"), SocketGroup: s.String("socket-group"), AllowUIDs: s.Ints("allow-uid"), AllowGIDs: s.Ints("allow-gid"),
		BearerTokenFile: s.String("bearer-token-file"), AuditLog: s.String("audit-log"),
		TLS:              agent.TLSFiles{Cert: s.String("tls-cert"), Key: s.String("tls-key"), ClientCA: s.String("tls-client-ca")},
		TokenConcurrency: s.Int("token-concurrency"), QueueSize: s.Int("queue-size"), TokenDelay: s.Duration("token-delay"),
		SessionTTL: s.Duration("session-ttl"), RequestDeadline: s.Duration("request-deadline"), MaxBody: int64(s.Int("max-body")),
		ShutdownGrace: s.Duration("shutdown-grace"), LegacySNILS: s.Bool("legacy-snils"),
		Policy: agent.Policy{ExposeCanonical: s.Bool("expose-canonical"), ExposeLegacyHeader: s.Bool("expose-legacy-header"), NoCertificateLogin: !s.Bool("certificate-login")},
		APIURL: biz.URL, AllowInsecureAPI: svc.InsecureHTTP, ServiceMaxBody: int64(s.Int("service-max-body")),
		ServiceBodyBudget: int64(s.Int("service-body-budget")), ServiceMaxHeaderFields: s.Int("service-max-header-fields"),
		ServiceMaxHeaderBytes: int64(s.Int("service-max-header-bytes"))}
	var errs [9]error // all are reported, not only the first (and the store's)
	cfg.Token, errs[0] = cmdutil.SelectionFrom(s, false)
	cfg.Signature, errs[1] = signatureOptions(s)
	cfg.Routes, errs[2] = access.ParseRouteRules(s.Strings("routes"))
	// Each part is needed only by the schemes that use it: the token and
	// the API key by signatures and trusted sessions (and certificate
	// logins), which an agent for OpenID Connect or legacy passwords alone
	// does without.
	cfg.NoToken = !signingWanted(s)
	if !cfg.NoToken {
		cfg.APIKey, errs[3] = cmdutil.APIKeyFrom(s) // needed for signatures and sessions alike
	}
	errs[7] = oidcSettingsComplete(s)
	if cfg.NoToken && !hasDeveloperKey(s) && oid.URL == "" && oid.ClientID == "" {
		errs[8] = cmdutil.UsageErr(errors.New("nothing to serve: give the partner API key (SIGNAGENT_API_KEY or --api-key-file) and a token for signatures and sessions, " +
			"--business-url with a developer key for the legacy scheme, or --oidc-url and --client-id for OpenID Connect"))
	}
	if svc.TrustedURL != "" {
		cfg.Service, errs[4] = trustedConfig(s, e, cfg.APIKey)
	}
	switch {
	case biz.URL == "":
		e.Log.Info().Msg("no --business-url: legacy authorizations and the business proxy answer 503 until one is configured")
	case !hasDeveloperKey(s):
		// The proxy serves OpenID Connect profiles without it.
		e.Log.Warn().Msg("no developer key (SIGNAGENT_DEVELOPER_KEY or --developer-key-file): the legacy and trusted schemes answer 503")
	default:
		cfg.Schemes.Legacy, errs[5] = legacyAgentConfig(s, e)
	}
	// The shared store, opened once: OpenID Connect records, trusted
	// sessions and legacy tokens are all kept there.
	shared, serr := openStore(s)
	if shared != nil {
		cfg.SharedStore = shared
	}
	cfg.Schemes.OIDC, errs[6] = oidcAgentConfig(s, e, shared)
	moreSchemes(s, e, &cfg.Schemes)
	err := settings.Join(append(append(errs[:], serr), s.Err())...)
	if err != nil && shared != nil {
		shared.Close()
	}
	return cfg, err
}

// signingWanted says whether the agent signs: an API key, --trusted-url or a
// token named in any way (module, URI, token or key) asks for it.
func signingWanted(s *settings.Settings) bool {
	if cmdutil.APIKeySpec.Source(s).Given() || os.Getenv(pkcs11.ModuleEnv) != "" {
		return true
	}
	for _, name := range []string{"trusted-url", "module", "key", "token-label", "token-serial", "key-label", "key-id"} {
		if s.String(name) != "" {
			return true
		}
	}
	return false
}

// oidcSettingsComplete says, in one error, what OpenID Connect still
// needs when one of its settings is given.
func oidcSettingsComplete(s *settings.Settings) error {
	o := cmdutil.ReadOIDC(s)
	given := map[string]bool{"--oidc-url (SIGNAGENT_OIDC_URL)": o.URL != "", "--client-id (SIGNAGENT_CLIENT_ID)": o.ClientID != "",
		"the client secret (SIGNAGENT_CLIENT_SECRET or --client-secret-file)": cmdutil.ClientSecretSpec.Source(s).Given()}
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
	return cmdutil.UsageErr(fmt.Errorf("OpenID Connect is half configured: give %s too", strings.Join(missing, " and ")))
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
		o.Chain, err = cmdutil.ReadCerts(f)
	}
	return o, err
}
