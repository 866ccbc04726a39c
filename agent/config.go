package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agent/access"
	"github.com/signagent/signagent/agent/listen"
	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

// MaxServiceHeaderFields and MaxServiceHeaderBytes are the most
// --service-max-header-fields and --service-max-header-bytes take: what a
// signagent client reads of an answer's head (agentclient.MaxHeaderFields,
// MaxHeaderBytes) less what the agent adds to a proxied answer's head
// (X-Request-Id, Date, Content-Length or Transfer-Encoding, Content-Type,
// Connection, Trailer: 8 fields, 4 KiB, with room), so that a head the
// agent takes reaches the caller.
const (
	MaxServiceHeaderFields = agentclient.MaxHeaderFields - 8
	MaxServiceHeaderBytes  = agentclient.MaxHeaderBytes - 4<<10
)

// Config is everything the daemon runs with, resolved by the caller from
// its flags, environment and configuration file. Reload takes a new one.
type Config struct {
	// Version and Commit are the program's version and commit, exported
	// as signagent_build_info.
	Version, Commit string
	// MetricsListen is HOST:PORT of a TCP listener serving /metrics,
	// /livez and /readyz alone, without the bearer token (over TLS with
	// the TLS files); "" for none.
	MetricsListen string
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
	Service *trusted.Config
	// SessionTTL is how long an auth.sid is served from the cache (well
	// under the service's 30 days).
	SessionTTL time.Duration
	// RequestDeadline bounds each request, waiting for the token included.
	RequestDeadline time.Duration
	ShutdownGrace   time.Duration
	// MaxBody bounds request bodies (the proxy's: ServiceMaxBody).
	MaxBody int64
	// LegacySNILS accepts SNILS numbers whose check number fails the rule.
	LegacySNILS bool
	// Policy is what the agent hands out and does (reloadable).
	Policy
	// Routes opens routes per caller class (see access.RouteRule).
	Routes []access.RouteRule
	// RefreshFloor: a caller's "refresh": true replaces a session or an
	// Authorization header only once it is this old (default
	// DefaultRefreshFloor); a younger one is handed out again, so that a
	// caller repeating refresh cannot make the agent log in or sign on
	// every request. A value the service refused (the proxy's retry) is
	// replaced at once. Taken at start.
	RefreshFloor time.Duration
	// APIURL is the business API the proxy (/v1/service/{method}) forwards
	// to; empty answers proxied calls with 503. AllowInsecureAPI allows
	// plain http to a host that is not loopback. ServiceMaxBody bounds a
	// proxied call's body (default 16 MiB).
	APIURL           string
	AllowInsecureAPI bool
	ServiceMaxBody   int64
	// ServiceBodyBudget bounds the proxied bodies held at once, in memory
	// or spooled (default 256 MiB); a call that does not fit is answered
	// 503 busy at once. Taken at start.
	ServiceBodyBudget int64
	// ServiceMaxHeaderFields and ServiceMaxHeaderBytes bound each head of
	// the business API's answers (0: httpx.DefaultHeadFields, 100, and
	// httpx.DefaultHeadBytes, 64 KiB): a field costs about 400 bytes to
	// hold, so a head is bounded by what it costs, not by its bytes
	// alone. Past either the call is answered 502. At most
	// MaxServiceHeaderFields and MaxServiceHeaderBytes. Reloadable.
	ServiceMaxHeaderFields int
	ServiceMaxHeaderBytes  int64
	// Schemes are the settings of the schemes the agent serves (legacy,
	// OpenID Connect, ...), read by the caller, and SchemeList the schemes
	// themselves (nil: schemes.List()). The agent builds them at start and
	// on every reload with what it lends them (schemes.Deps: the token's
	// decrypter, the shared store, the trusted sessions, its log, a
	// refresh hook); SchemeList is taken at start.
	Schemes    schemes.Settings
	SchemeList []schemes.Entry
	// SharedStore, when set, holds the records the agents on it share:
	// the trusted sessions, and the schemes' (lent as schemes.Deps.Store;
	// the OpenID Connect records are in Schemes.OIDC.Records).
	SharedStore store.Records

	Log zerolog.Logger
	// Open opens the token (default pkcs11.Open).
	Open func(context.Context, pkcs11.Selection, zerolog.Logger) (tokenq.Token, error)
	// Probe, when set, tries the module before Start touches the token (the
	// CLI loads it in a child process first, so that a crashing module is
	// an error line, not a dead agent).
	Probe func(context.Context, pkcs11.Selection) error
}

// DefaultRequestDeadline is the deadline serve gives a request unless
// told otherwise (Config.RequestDeadline).
const DefaultRequestDeadline = 30 * time.Second

// DefaultServiceBodyBudget is Config.ServiceBodyBudget's default.
const DefaultServiceBodyBudget = proxy.DefaultBodyBudget

// DefaultRefreshFloor is Config.RefreshFloor's default.
const DefaultRefreshFloor = 30 * time.Second

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
var ErrConfig = errdefs.New(errdefs.ErrInvalidInput, "configuration")

type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }

func (e configError) Unwrap() error { return e.err }

func (e configError) Is(target error) bool {
	return target == ErrConfig || errors.Is(ErrConfig, target)
}

func badConfig(err error) error { return configError{err} }

func (c *Config) validate() error {
	var notPositive []string // each bad one named, not the list of all
	for _, v := range []struct {
		name string
		bad  bool
		val  any
	}{
		{"token-concurrency", c.TokenConcurrency < 1, c.TokenConcurrency}, {"queue-size", c.QueueSize < 1, c.QueueSize},
		{"max-body", c.MaxBody < 1, c.MaxBody}, {"request-deadline", c.RequestDeadline <= 0, c.RequestDeadline},
		{"session-ttl", c.SessionTTL <= 0, c.SessionTTL},
	} {
		if v.bad {
			notPositive = append(notPositive, fmt.Sprintf("%s must be positive, not %v", v.name, v.val))
		}
	}
	if len(notPositive) > 0 {
		return badConfig(errors.New(strings.Join(notPositive, "; ")))
	}
	if c.ServiceBodyBudget < 0 || (c.ServiceBodyBudget > 0 && c.ServiceBodyBudget < cmp.Or(c.ServiceMaxBody, 16<<20)) {
		return badConfig(errors.New("service-body-budget must be at least service-max-body (a body that fits the one must fit the other)"))
	}
	if c.ServiceMaxHeaderFields < 0 || c.ServiceMaxHeaderBytes < 0 {
		return badConfig(fmt.Errorf("service-max-header-fields and service-max-header-bytes must not be negative, not %d and %d", c.ServiceMaxHeaderFields, c.ServiceMaxHeaderBytes))
	}
	if c.ServiceMaxHeaderFields > MaxServiceHeaderFields {
		return badConfig(fmt.Errorf("service-max-header-fields %d is more than %d, the most a signagent client reads of a proxied answer's head with the agent's own fields", c.ServiceMaxHeaderFields, MaxServiceHeaderFields))
	}
	if c.ServiceMaxHeaderBytes > MaxServiceHeaderBytes {
		return badConfig(fmt.Errorf("service-max-header-bytes %d is more than %d, the most a signagent client reads of a proxied answer's head with the agent's own fields", c.ServiceMaxHeaderBytes, MaxServiceHeaderBytes))
	}
	if c.APIURL != "" {
		if _, err := httpx.ParseBaseURL(c.APIURL, c.AllowInsecureAPI); err != nil {
			return badConfig(fmt.Errorf("--business-url: %w", err))
		}
	}
	c.RefreshFloor = cmp.Or(c.RefreshFloor, DefaultRefreshFloor)
	c.ServiceMaxBody = cmp.Or(c.ServiceMaxBody, 16<<20)
	c.ServiceBodyBudget = cmp.Or(c.ServiceBodyBudget, DefaultServiceBodyBudget)
	if c.SchemeList == nil {
		c.SchemeList = schemes.List()
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Open == nil {
		c.Open = func(ctx context.Context, sel pkcs11.Selection, log zerolog.Logger) (tokenq.Token, error) {
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

// TLSFiles names the certificate, key and (optional) client CA of a TLS
// listener (listen.TLSFiles).
type TLSFiles = listen.TLSFiles
