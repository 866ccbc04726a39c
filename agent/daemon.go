package agent

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/safefile"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

// Config is everything the daemon runs with, resolved by the caller from
// its flags, environment and configuration file. Reload takes a new one.
type Config struct {
	// Listen holds unix:PATH and tcp:HOST:PORT addresses. With none and no
	// Inherited listeners the agent listens on DefaultSocket().
	Listen []string
	// Inherited are sockets handed over by systemd: Unix ones authenticate
	// callers by their credentials, the others by the bearer token.
	Inherited []net.Listener
	// SocketGroup (a name or a gid) owns created sockets, which are then
	// mode 0660 instead of 0600.
	SocketGroup string
	// AllowUIDs and AllowGIDs restrict Unix callers (empty: anyone who can
	// reach the socket).
	AllowUIDs, AllowGIDs []int
	// BearerTokenFile holds the TCP callers' token; created when absent
	// (default: beside DefaultSocket()).
	BearerTokenFile string
	TLS             TLSFiles
	// AuditLog is a file (appended, 0600, reopened by Reload), "-" or ""
	// for Stderr, or os.DevNull for none.
	AuditLog string
	Stderr   io.Writer

	Token pkcs11.Selection
	// NoToken starts the agent without a token: it signs nothing (no
	// signatures, sessions, links or certificate logins) and serves OpenID
	// Connect and legacy password identities alone. It is set at start;
	// a reload that changes it is logged and takes a restart.
	NoToken          bool
	Signature        signer.Options
	TokenConcurrency int
	QueueSize        int
	TokenDelay       time.Duration

	APIKey string
	// Service is the trusted-authentication service; nil answers sessions
	// and links with 503. Its Signer is set by the daemon.
	Service         *trusted.Config
	SessionTTL      time.Duration
	RequestDeadline time.Duration
	ShutdownGrace   time.Duration
	MaxBody         int64
	LegacySNILS     bool
	ExposeCanonical bool
	// ExposeLegacyHeader and NoCertificateLogin: see Options.
	ExposeLegacyHeader bool
	NoCertificateLogin bool
	Routes             []RouteRule
	// Legacy is the legacy scheme's client configuration (the business API
	// address and the developer key); nil answers legacy authorizations
	// with 503. LegacyPasswords are the accounts it may log in as.
	Legacy          *legacy.Config
	LegacyPasswords map[string]string
	// APIURL is the business API the proxy (/v1/service/{method}) forwards
	// to; empty answers proxied calls with 503. AllowInsecureAPI allows
	// plain http to a host that is not loopback. ServiceMaxBody bounds a
	// proxied call's body (default 16 MiB).
	APIURL           string
	AllowInsecureAPI bool
	ServiceMaxBody   int64
	// ServiceBodyBudget bounds the proxied bodies held at once (default
	// 256 MiB); taken at start.
	ServiceBodyBudget int64
	// OIDC hands out the access tokens of the profiles an operator signed
	// in with signagent login (the same token store); nil answers oidc
	// authorizations with 503.
	OIDC *oidc.Tokens
	// SharedStore, when set, holds the trusted sessions the agents on it
	// share (the OpenID Connect records are in OIDC.Store).
	SharedStore *store.Redis

	Log zerolog.Logger
	// Open opens the token (default pkcs11.Open).
	Open func(context.Context, pkcs11.Selection, zerolog.Logger) (Token, error)
	// Probe, when set, tries the module before Start touches the token (the
	// CLI loads it in a child process first, so that a crashing module is
	// an error line, not a dead agent).
	Probe func(context.Context, pkcs11.Selection) error
}

// DefaultSocket is $XDG_RUNTIME_DIR/signagent/agent.sock for a user, and
// /run/signagent/agent.sock for root or a system service.
func DefaultSocket() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && os.Getuid() != 0 {
		return filepath.Join(d, "signagent", "agent.sock")
	}
	return "/run/signagent/agent.sock"
}

// ErrConfig marks an error in the configuration (as opposed to the token
// or the system): the CLI exits with its bad-input status.
var ErrConfig = errors.New("configuration")

type configError struct{ err error }

func (e configError) Error() string        { return e.err.Error() }
func (e configError) Unwrap() error        { return e.err }
func (e configError) Is(target error) bool { return target == ErrConfig }

func badConfig(err error) error { return configError{err} }

func (c *Config) validate() error {
	if c.TokenConcurrency < 1 || c.QueueSize < 1 || c.MaxBody < 1 || c.RequestDeadline <= 0 || c.SessionTTL <= 0 {
		return badConfig(errors.New("token-concurrency, queue-size, max-body, request-deadline and session-ttl must be positive"))
	}
	if c.ServiceBodyBudget < 0 || (c.ServiceBodyBudget > 0 && c.ServiceBodyBudget < cmp.Or(c.ServiceMaxBody, 16<<20)) {
		return badConfig(errors.New("service-body-budget must be at least service-max-body (a body that fits the one must fit the other)"))
	}
	if c.APIURL != "" {
		if _, err := httpx.ParseBaseURL(c.APIURL, c.AllowInsecureAPI); err != nil {
			return badConfig(fmt.Errorf("--api-url: %w", err))
		}
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Open == nil {
		c.Open = func(ctx context.Context, sel pkcs11.Selection, log zerolog.Logger) (Token, error) {
			return pkcs11.Open(ctx, sel, log)
		}
	}
	if c.BearerTokenFile == "" {
		c.BearerTokenFile = filepath.Join(filepath.Dir(DefaultSocket()), "bearer-token")
	}
	if len(c.Listen) == 0 && len(c.Inherited) == 0 {
		c.Listen = []string{"unix:" + DefaultSocket()}
	}
	return nil
}

// Daemon is a running agent: its listeners, token, caches, metrics and
// audit log.
type Daemon struct {
	cfg     Config
	log     zerolog.Logger
	agent   *Agent
	tm      *TokenManager
	peer    *PeerAuth
	bearer  *BearerAuth // nil without TCP listeners
	tls     atomic.Pointer[tls.Config]
	audit   *AuditFile // nil for stderr or none
	ls      []Listener
	servers *serverSet
	stamps  *trusted.Stamps // one for the daemon's life: every trusted client shares it

	mu     sync.Mutex // serializes Reload and Shutdown
	closed bool
}

// Start opens the audit log and the listeners (so that a bad address fails
// before the token is touched), then the token, and starts serving.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: cfg.Log, peer: NewPeerAuth(cfg.AllowUIDs, cfg.AllowGIDs), stamps: trusted.NewStamps()}
	if err := d.start(ctx); err != nil {
		d.release()
		return nil, err
	}
	return d, nil
}

func (d *Daemon) start(ctx context.Context) error {
	cfg := d.cfg
	audit, err := d.openAudit()
	if err != nil {
		return err
	}
	if err := d.listen(); err != nil {
		return err
	}
	if !cfg.NoToken {
		if err := d.openToken(ctx); err != nil {
			return err
		}
	} else {
		d.log.Info().Msg("no token: this agent signs nothing and serves OpenID Connect and legacy password identities")
	}
	client, err := d.serviceClient(cfg)
	if err != nil {
		return err
	}
	d.agent = New(Options{Token: d.tm, Client: client, APIKey: cfg.APIKey, Log: cfg.Log, Audit: NewAudit(audit),
		SessionTTL: cfg.SessionTTL, RequestDeadline: cfg.RequestDeadline, MaxBody: cfg.MaxBody, LegacySNILS: cfg.LegacySNILS,
		ExposeCanonical: cfg.ExposeCanonical, ExposeLegacyHeader: cfg.ExposeLegacyHeader, NoCertificateLogin: cfg.NoCertificateLogin, Routes: cfg.Routes, ServiceMaxBody: cfg.ServiceMaxBody, ServiceBodyBudget: cfg.ServiceBodyBudget})
	if err := d.agent.SetServiceAPI(cfg.APIURL, cfg.AllowInsecureAPI); err != nil {
		return err
	}
	lg, err := d.legacyScheme(cfg, Config{})
	if err != nil {
		return err
	}
	d.agent.SetLegacy(lg)
	d.agent.SetOIDC(d.oidcScheme(cfg))
	d.agent.SetSharedStore(cfg.SharedStore)
	d.servers = d.agent.startServers(d.ls)
	return nil
}

func (d *Daemon) openAudit() (io.Writer, error) {
	switch f := d.cfg.AuditLog; f {
	case "", "-":
		return d.cfg.Stderr, nil
	case os.DevNull:
		return io.Discard, nil
	default:
		a, err := OpenAuditFile(f)
		if err != nil {
			return nil, badConfig(err)
		}
		d.audit = a
		return a, nil
	}
}

func (d *Daemon) openToken(ctx context.Context) error {
	sel := d.cfg.Token
	if d.cfg.Probe != nil {
		pctx, cancel := context.WithTimeout(ctx, sel.Timeout)
		err := d.cfg.Probe(pctx, sel)
		cancel()
		if err != nil {
			return err
		}
	}
	tm, err := NewTokenManager(TokenOptions{
		ID: selectionID(sel), OpenTimeout: sel.Timeout, Open: d.opener(d.cfg),
		Signature: d.cfg.Signature, Workers: d.cfg.TokenConcurrency, Backlog: d.cfg.QueueSize, Delay: d.cfg.TokenDelay, Log: d.log,
		OnSign: func(t time.Duration, err error) {
			if a := d.agent; a != nil {
				a.ObserveSign(t, err)
			}
		},
	})
	if err != nil {
		return err
	}
	d.tm = tm
	return nil
}

func (d *Daemon) opener(cfg Config) Opener {
	return func(ctx context.Context) (Token, error) { return cfg.Open(ctx, cfg.Token, cfg.Log) }
}

// serviceClient is the trusted client the agent runs sessions and links
// with, signing through the token manager's queue; nil without a service.
func (d *Daemon) serviceClient(cfg Config) (*trusted.Client, error) {
	if cfg.Service == nil {
		if !cfg.NoToken {
			d.log.Warn().Msg("no --base-url: /v1/sessions and /v1/links answer 503 until one is configured")
		}
		return nil, nil
	}
	sc := *cfg.Service
	sc.Signer, sc.Stamps = d.tm, d.stamps
	c, err := trusted.New(sc)
	if err != nil {
		return nil, badConfig(err)
	}
	return c, nil
}

// legacyScheme builds the legacy scheme's token cache for cfg. When the
// configuration is the same as was (a reload that did not touch it), the
// current cache is kept, with its tokens.
func (d *Daemon) legacyScheme(cfg, was Config) (*Legacy, error) {
	if cfg.Legacy == nil {
		d.log.Info().Msg("the legacy scheme is off (no --api-url or no developer key): its authorizations answer 503")
		return nil, nil
	}
	if sameLegacy(was.Legacy, cfg.Legacy) && maps.Equal(was.LegacyPasswords, cfg.LegacyPasswords) && d.agent != nil {
		if cur := d.agent.legacy.Load(); cur != nil {
			return cur, nil
		}
	}
	lc := *cfg.Legacy
	lc.Log = d.log
	c, err := legacy.New(lc)
	if err != nil {
		return nil, badConfig(err)
	}
	return &Legacy{Tokens: legacy.NewTokens(c, 0, cfg.RequestDeadline), Passwords: cfg.LegacyPasswords}, nil
}

// oidcScheme wires cfg's token source to the metrics and the log.
func (d *Daemon) oidcScheme(cfg Config) *oidc.Tokens {
	t := cfg.OIDC
	if t == nil {
		return nil
	}
	if t.Timeout <= 0 {
		t.Timeout = cfg.RequestDeadline
	}
	m, log := d.agent.metrics, d.log
	t.OnRefresh = func(profile, result string) {
		m.oidcRefreshes.WithLabelValues(result).Inc()
		log.Info().Str("profile", profile).Str("result", result).Msg("OpenID Connect refresh")
	}
	return t
}

func sameLegacy(a, b *legacy.Config) bool {
	return a != nil && b != nil && a.APIURL == b.APIURL && a.AllowInsecureHTTP == b.AllowInsecureHTTP &&
		a.DeveloperKey == b.DeveloperKey && a.TokenTTL == b.TokenTTL && a.Timeout == b.Timeout && a.Attempts == b.Attempts
}

// selectionID names a token selection, so that a reload that does not
// change it does not reopen the token.
func selectionID(sel pkcs11.Selection) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%#v", sel)))
	return hex.EncodeToString(sum[:])
}

// Addrs lists the addresses served, as network:address.
func (d *Daemon) Addrs() []string {
	out := make([]string, len(d.ls))
	for i, l := range d.ls {
		out[i] = l.Addr().Network() + ":" + l.Addr().String()
	}
	return out
}

// Ready says whether the token is ready now.
func (d *Daemon) Ready() bool { return d.agent.readiness().Status == "ready" }

// Failed delivers an error when a listener stops serving on its own.
func (d *Daemon) Failed() <-chan error { return d.servers.errs }

// Reload applies a new configuration while serving: caller allow-lists and
// route rules, the bearer token, the TLS certificate, the service address
// and API key, the session lifetime and the token selection. New state is
// built and checked first, then swapped in; the old drains. What does not
// change is left alone: an unchanged token selection keeps the token open
// and the agent ready throughout. The audit log is reopened (rotation).
// Listen addresses, the socket group and the audit log's path take a
// restart; a change to them is logged and otherwise ignored.
func (d *Daemon) Reload(cfg Config) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("the agent is shutting down")
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	if d.audit != nil {
		if err := d.audit.Reopen(); err != nil {
			d.log.Error().Err(err).Msg("could not reopen the audit log; still writing to the old one")
		}
	}
	if needsRestart(d.cfg, cfg) {
		d.log.Warn().Msg("listen addresses, the socket group, the audit log's path and whether the agent has a token change only on restart")
	}
	// Build and check everything before changing anything.
	var tok string
	if d.bearer != nil {
		var err error
		if tok, err = bearerToken(cfg.BearerTokenFile, d.log); err != nil {
			return err
		}
	}
	var tlsCfg *tls.Config
	if d.tls.Load() != nil {
		var err error
		if tlsCfg, err = cfg.TLS.Config(); err != nil {
			return badConfig(err)
		}
	}
	client, err := d.serviceClient(cfg)
	if err != nil {
		return err
	}
	lg, err := d.legacyScheme(cfg, d.cfg)
	if err != nil {
		return err
	}
	d.peer.Set(cfg.AllowUIDs, cfg.AllowGIDs)
	if d.bearer != nil {
		d.bearer.Set(tok)
	}
	if tlsCfg != nil {
		d.tls.Store(tlsCfg)
	}
	d.agent.SetService(cfg.APIKey, client)
	d.agent.SetLegacy(lg)
	d.agent.SetOIDC(d.oidcScheme(cfg))
	d.agent.SetSharedStore(cfg.SharedStore)
	if was := d.cfg.SharedStore; was != nil && was != cfg.SharedStore {
		was.Close() // requests still holding it get an error, as from a store that went away
	}
	d.agent.SetSessionTTL(cfg.SessionTTL)
	_ = d.agent.SetServiceAPI(cfg.APIURL, cfg.AllowInsecureAPI) // checked by validate
	d.agent.SetRouteRules(cfg.Routes)
	d.agent.SetPolicy(Policy{ExposeCanonical: cfg.ExposeCanonical, ExposeLegacyHeader: cfg.ExposeLegacyHeader, NoCertificateLogin: cfg.NoCertificateLogin})
	if d.tm != nil {
		if err := d.tm.Reopen(d.opener(cfg), selectionID(cfg.Token)); err != nil {
			d.log.Warn().Err(err).Msg("the token did not reopen")
		}
	}
	d.cfg = cfg
	return nil
}

func needsRestart(was, now Config) bool {
	return strings.Join(was.Listen, "\n") != strings.Join(now.Listen, "\n") ||
		was.SocketGroup != now.SocketGroup || was.AuditLog != now.AuditLog || was.NoToken != now.NoToken
}

// Shutdown stops accepting, lets requests in flight finish until ctx is
// done (then cuts them off), closes the token and the audit log, and
// removes the sockets this process created. Requests cut off are logged.
func (d *Daemon) Shutdown(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.closed = true
	if d.servers != nil {
		d.servers.shutdown(ctx, d.log)
	}
	d.release()
}

// Grace is the configured shutdown grace period.
func (d *Daemon) Grace() time.Duration { return d.cfg.ShutdownGrace }

// release closes what Start opened.
func (d *Daemon) release() {
	for _, l := range d.ls {
		l.Close()
		if u, ok := l.Listener.(*unixListener); ok && l.Path != "" {
			u.removeSocket()
		}
	}
	if d.tm != nil {
		d.tm.Close()
	}
	if d.audit != nil {
		d.audit.Close()
	}
}

// listen opens the inherited and configured listeners.
func (d *Daemon) listen() error {
	for _, l := range d.cfg.Inherited {
		if l == nil {
			continue
		}
		if _, ok := l.(*net.UnixListener); ok {
			d.ls = append(d.ls, Listener{Listener: l, Auth: d.peer})
			continue
		}
		tl, err := d.inheritedTCP(l)
		if err != nil {
			return err
		}
		d.ls = append(d.ls, tl)
	}
	for _, spec := range d.cfg.Listen {
		l, err := d.listenOn(spec)
		if err != nil {
			return err
		}
		d.ls = append(d.ls, l)
	}
	return nil
}

// inheritedTCP serves a TCP socket systemd passed under the rules of
// --listen tcp: (TLS, loopback, bearer token).
func (d *Daemon) inheritedTCP(l net.Listener) (Listener, error) {
	return d.tcpListener(func(tlsCfg *tls.Config) (net.Listener, error) { return InheritedTCP(l, tlsCfg) })
}

func (d *Daemon) listenOn(spec string) (Listener, error) {
	network, addr, err := ParseListen(spec)
	if err != nil {
		return Listener{}, badConfig(err)
	}
	if network == "unix" {
		us := UnixSocket{Path: addr}
		if g := d.cfg.SocketGroup; g != "" {
			if us.Group, err = lookupGroup(g); err != nil {
				return Listener{}, err
			}
			us.HasGroup = true
		}
		l, err := ListenUnix(us)
		if err != nil {
			return Listener{}, err
		}
		return Listener{Listener: l, Auth: d.peer, Path: addr}, nil
	}
	return d.tcpListener(func(tlsCfg *tls.Config) (net.Listener, error) { return ListenTCP(addr, tlsCfg) })
}

// tcpListener is the one place a TCP listener gets its rules, whether
// opened here or passed in by systemd: TLS when a certificate is given,
// refused beyond loopback without it, and the bearer token.
func (d *Daemon) tcpListener(open func(*tls.Config) (net.Listener, error)) (Listener, error) {
	tlsCfg, err := d.serverTLS()
	if err != nil {
		return Listener{}, err
	}
	b, err := d.needBearer()
	if err != nil {
		return Listener{}, err
	}
	l, err := open(tlsCfg)
	if errors.Is(err, ErrInsecureListen) {
		return Listener{}, badConfig(err)
	}
	if err != nil {
		return Listener{}, err
	}
	return Listener{Listener: l, Auth: b}, nil
}

// serverTLS loads the TLS files once and returns a configuration that
// reads the current one at each handshake, so that Reload can replace the
// certificate; nil without TLS files.
func (d *Daemon) serverTLS() (*tls.Config, error) {
	if d.tls.Load() == nil {
		c, err := d.cfg.TLS.Config()
		if err != nil {
			return nil, badConfig(err)
		}
		if c == nil {
			return nil, nil
		}
		d.tls.Store(c)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return d.tls.Load(), nil
	}}, nil
}

func (d *Daemon) needBearer() (*BearerAuth, error) {
	if d.bearer == nil {
		tok, err := bearerToken(d.cfg.BearerTokenFile, d.log)
		if err != nil {
			return nil, err
		}
		d.bearer = NewBearerAuth(tok)
	}
	return d.bearer, nil
}

// bearerToken reads the bearer token file (checked like every secret
// file: regular, not readable by every user), creating it with a random
// token (mode 0600) when it does not exist.
func bearerToken(path string, log zerolog.Logger) (string, error) {
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
		if err := safefile.Write(path, []byte(tok+"\n"), 0o600); err != nil {
			return "", err
		}
		log.Info().Str("file", path).Msg("created a bearer token for TCP callers")
		return tok, nil
	}
	if err != nil {
		return "", badConfig(fmt.Errorf("the bearer token file: %w", err))
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", badConfig(fmt.Errorf("the bearer token in %s is shorter than 16 characters", path))
	}
	return tok, nil
}

func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return 0, badConfig(fmt.Errorf("--socket-group %q: %w", g, err))
	}
	return strconv.Atoi(gr.Gid)
}
