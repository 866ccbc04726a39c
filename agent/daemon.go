package agent

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agent/access"
	"github.com/signagent/signagent/agent/auditlog"
	"github.com/signagent/signagent/agent/listen"
	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/trusted"
)

// Daemon is a running agent: its listeners, token, caches, metrics and
// audit log.
type Daemon struct {
	cfg    Config
	log    zerolog.Logger
	agent  *Agent
	tm     *tokenq.Manager
	peer   *access.PeerAuth
	bearer *access.BearerAuth // nil without TCP listeners
	tls    atomic.Pointer[tls.Config]
	audit  *auditlog.File // nil for stderr or none
	ls     []Listener
	// metricsLn is the metrics listener (--metrics-listen; nil: none).
	metricsLn net.Listener
	servers   *serverSet
	stamps    *trusted.Stamps // one for the daemon's life: every trusted client shares it

	mu     sync.Mutex // serializes Reload and Shutdown
	closed bool
}

// Start opens the audit log and the listeners (so that a bad address fails
// before the token is touched), then the token, and starts serving.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: cfg.Log, peer: access.NewPeerAuth(cfg.AllowUIDs, cfg.AllowGIDs), stamps: trusted.NewStamps()}
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
	if err := d.listenMetrics(); err != nil {
		return err
	}
	if !cfg.NoToken {
		if err := d.openToken(ctx); err != nil {
			return err
		}
	} else {
		d.log.Info().Msg("no token: this agent signs nothing and serves OpenID Connect and legacy password identities")
	}
	d.agent = newAgent(cfg, d.tm, auditlog.NewWriter(audit))
	st, err := d.state(cfg)
	if err != nil {
		return err
	}
	d.agent.reload(st, cfg.SessionTTL)
	d.servers = d.agent.startServers(d.ls, d.metricsLn)
	return nil
}

func (d *Daemon) openAudit() (io.Writer, error) {
	switch f := d.cfg.AuditLog; f {
	case "", "-":
		return d.cfg.Stderr, nil
	case os.DevNull:
		return io.Discard, nil
	default:
		a, err := auditlog.Open(f)
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
	tm, err := tokenq.New(tokenq.Options{
		ID: selectionID(sel), OpenTimeout: sel.Timeout, Open: d.opener(d.cfg),
		Signature: d.cfg.Signature, Workers: d.cfg.TokenConcurrency, Backlog: d.cfg.QueueSize, Delay: d.cfg.TokenDelay, Log: d.log,
		OnSign: func(t time.Duration, err error) {
			if a := d.agent; a != nil {
				a.metrics.Sign(t, err)
			}
		},
	})
	if err != nil {
		return err
	}
	d.tm = tm
	return nil
}

// opener opens cfg's token: the first time (want nil) as the selection
// says, warning when that is without the token's serial; later only the
// token and key opened before (tokenq pins them).
func (d *Daemon) opener(cfg Config) tokenq.Opener {
	return func(ctx context.Context, want *pkcs11.Identity) (tokenq.Token, error) {
		sel := cfg.Token
		sel.Expect = want
		tok, err := cfg.Open(ctx, sel, cfg.Log)
		if err == nil && want == nil {
			if s := tokenq.SerialAdvice(sel, tok); s != "" {
				cfg.Log.Warn().Msg(s)
			}
		}
		return tok, err
	}
}

// state is the agent's reloadable state as cfg configures it, built and
// checked whole before anything changes: at start and on every reload.
// What cfg leaves as it was (a scheme's settings, the business API's
// address) keeps its caches and connections.
func (d *Daemon) state(cfg Config) (*state, error) {
	client, err := d.serviceClient(cfg)
	if err != nil {
		return nil, err
	}
	target, err := d.agent.proxyTarget(cfg)
	if err != nil {
		return nil, err
	}
	st := &state{key: cfg.APIKey, client: client, rules: cfg.Routes, policy: cfg.Policy, shared: cfg.SharedStore, target: target}
	if st.schemes, err = schemes.Build(d.cfg.SchemeList, cfg.Schemes, d.agent.lend(st, cfg.RequestDeadline)); err != nil {
		return nil, badConfig(err)
	}
	return st, nil
}

// serviceClient is the trusted client the agent runs sessions and links
// with, signing through the token manager's queue; nil without a service.
func (d *Daemon) serviceClient(cfg Config) (*trusted.Client, error) {
	if cfg.Service == nil {
		if !cfg.NoToken {
			d.log.Warn().Msg("no --trusted-url: /v1/sessions and /v1/links answer 503 until one is configured")
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

// MetricsAddr is the metrics listener's address (HOST:PORT), "" without
// one.
func (d *Daemon) MetricsAddr() string {
	if d.metricsLn == nil {
		return ""
	}
	return d.metricsLn.Addr().String()
}

// Ready says whether the agent is ready now (degraded is: a shared
// dependency failing does not take it out of service).
func (d *Daemon) Ready() bool { return d.agent.readiness().Status != agentapi.StatusNotReady }

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
// ReopenAudit reopens the audit log file by its path, and nothing else
// (SIGUSR1: logrotate moved the file; the configuration is not read
// again, so a rotation never applies a half-edited file).
func (d *Daemon) ReopenAudit() error {
	if d.audit == nil {
		return nil
	}
	return d.audit.Reopen()
}

// Reload applies cfg: everything reloadable is built and checked first,
// then swapped in at once (one new state); a reload that fails leaves the
// agent as it was. Listen addresses and the like change only on restart
// (it warns).
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
		d.log.Warn().Msg("listen addresses (the metrics listener's too), the socket group, the audit log's path and whether the agent has a token change only on restart")
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
	st, err := d.state(cfg)
	if err != nil {
		return err
	}
	// Nothing is changed before this point: a reload that fails leaves
	// the agent as it was.
	d.peer.Set(cfg.AllowUIDs, cfg.AllowGIDs)
	if d.bearer != nil {
		d.bearer.Set(tok)
	}
	if tlsCfg != nil {
		d.tls.Store(tlsCfg)
	}
	// Everything reloadable changes at once: one new state, one swap.
	d.agent.reload(st, cfg.SessionTTL)
	if was, ok := d.cfg.SharedStore.(io.Closer); ok && d.cfg.SharedStore != cfg.SharedStore {
		was.Close() // requests still holding it get an error, as from a store that went away
	}
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
		was.SocketGroup != now.SocketGroup || was.MetricsListen != now.MetricsListen || was.AuditLog != now.AuditLog || was.NoToken != now.NoToken
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

// release closes what Start opened. The shared store's announcement goes
// last, once no request is in flight: writers may move to a format this
// agent does not read only when it reads no more.
func (d *Daemon) release() {
	if d.agent != nil {
		close(d.agent.stop) // the store's probe
	}
	defer func() {
		if w, ok := d.cfg.SharedStore.(interface{ Withdraw() }); ok {
			w.Withdraw()
		}
	}()
	for _, l := range d.ls {
		l.Close()
		if l.Path != "" {
			listen.RemoveSocket(l.Listener)
		}
	}
	if d.metricsLn != nil {
		d.metricsLn.Close()
	}
	if d.tm != nil {
		d.tm.Close()
	}
	if d.audit != nil {
		d.audit.Close()
	}
}
