// Package tokenq owns the agent's token: it opens it, signs and decrypts
// through a bounded queue of token workers, watches that the token is still
// there, answers at once while it is out, and reconnects with backoff. It
// knows nothing of HTTP: the agent asks it for signatures and its state.
package tokenq

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/uri"
	"github.com/signagent/signagent/signer"
)

// Token is what the agent needs of a token: pkcs11.Key is one.
type Token interface {
	crypto.Signer
	Certificate() *x509.Certificate
	Label() string
	Close() error
}

// Opener opens the token and finds the key within ctx. pkcs11.Open wrapped
// in a closure is one. want, when not nil, is the token and key opened
// before with the same selection (pkcs11.Selection.Expect): only that
// token may be logged in to and only that key used, so that a card
// swapped in gets no PIN and signs nothing.
type Opener func(ctx context.Context, want *pkcs11.Identity) (Token, error)

// identified is a Token that says what it was opened on (pkcs11.Key).
type identified interface {
	Identity() pkcs11.Identity
}

// checker is a Token that can say whether it is still there (pkcs11.Key).
type checker interface {
	Check(ctx context.Context) error
}

// ErrNotReady is returned while the token is out or reconnecting.
var ErrNotReady = errdefs.New(errdefs.ErrTokenNotReady, "the token is not ready")

// ErrNoToken is returned by what needs the token (signatures, sessions,
// certificate logins) in an agent configured without one.
var ErrNoToken = errdefs.New(errdefs.ErrNotConfigured, "this agent has no token: it was started for OpenID Connect or legacy passwords alone (signing needs the partner API key and a token: --api-key-file, --module or --key)")

// State is the token's state as /readyz reports it.
type State = agentapi.TokenState

// conn is one open token: the key, its CMS signer, and the signatures in
// flight on it, so that a replaced connection is closed only once they are
// done.
type conn struct {
	tok    Token
	cms    *signer.CMS
	flight sync.WaitGroup
}

// close waits for the signatures in flight, then closes the token. A
// token's operations are bounded by its own deadline, so this ends.
func (c *conn) close() {
	c.flight.Wait()
	c.tok.Close()
}

// Manager owns the token: it signs through a bounded queue, notices
// when the token goes away, answers at once while it is out, and reconnects
// with backoff until it is back.
type Manager struct {
	opts    signer.Options
	log     zerolog.Logger
	q       *queue
	backoff [2]time.Duration // first, max
	delay   time.Duration    // added to each signature (slow-card mode)
	onSign  func(time.Duration, error)
	timeout time.Duration // bounds an open and a check
	every   time.Duration // how often an idle token is checked

	mu   sync.RWMutex
	open Opener
	id   string // what open opens (see Reopen)
	// pinned is the token and key last opened: its reconnects
	// open only them. A new selection (Reopen with another id) drops it.
	pinned       *pkcs11.Identity
	cur          *conn // nil while not ready
	state        State
	reconnecting bool
	closed       bool
	stop         chan struct{}
}

// Options configures a Manager.
type Options struct {
	Open Opener
	// ID names what Open opens (the selection); Reopen with the same ID
	// while the token is ready changes nothing.
	ID           string
	Signature    signer.Options
	Workers      int           // concurrent token operations (default 1)
	Backlog      int           // requests that may wait (default 64)
	BackoffFirst time.Duration // first reconnect delay (default 100ms)
	BackoffMax   time.Duration // longest reconnect delay (default 1s)
	Delay        time.Duration // slow-card mode: added to every signature
	OpenTimeout  time.Duration // bounds opening the token and each check (default 30s)
	CheckEvery   time.Duration // how often the token is asked whether it is there (default 1s, so that /readyz sees a card out within about 2 s; <0: never)
	Log          zerolog.Logger
	OnSign       func(time.Duration, error) // observes each signature (metrics)
}

// New opens the token (failing only for a wrong PIN or a
// selection that cannot work; a missing token is retried in the
// background).
func New(o Options) (*Manager, error) {
	if o.Workers < 1 {
		o.Workers = 1
	}
	if o.Backlog < 1 {
		o.Backlog = 64
	}
	if o.BackoffFirst <= 0 {
		o.BackoffFirst = 100 * time.Millisecond
	}
	if o.BackoffMax < o.BackoffFirst {
		// A returning token is seen within about a second; a retry costs
		// little (the module is initialized again, no PIN is sent twice).
		o.BackoffMax = time.Second
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = 30 * time.Second
	}
	if o.CheckEvery == 0 {
		o.CheckEvery = time.Second
	}
	m := &Manager{open: o.Open, id: o.ID, opts: o.Signature, log: o.Log, q: newQueue(o.Workers, o.Backlog),
		backoff: [2]time.Duration{o.BackoffFirst, o.BackoffMax}, delay: o.Delay, onSign: o.OnSign,
		timeout: o.OpenTimeout, every: o.CheckEvery, stop: make(chan struct{})}
	m.state = State{Reason: "starting", Since: agentapi.At(time.Now())}
	if err := m.connect(); err != nil {
		if !canWaitFor(err) {
			m.q.close()
			return nil, err
		}
		m.log.Warn().Err(err).Msg("the token is not there yet; retrying in the background")
		m.startReconnect(err)
	}
	if m.every > 0 {
		go m.watch()
	}
	return m, nil
}

// lease returns the current connection with one more operation in flight
// on it (the caller calls flight.Done), or nil while not ready.
func (m *Manager) lease() *conn {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cur == nil {
		return nil
	}
	m.cur.flight.Add(1)
	return m.cur
}

// openConn opens the token with open, only the one want names when set.
func (m *Manager) openConn(open Opener, want *pkcs11.Identity) (*conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	tok, err := open(ctx, want)
	if _, ok := tokenerr.Code(err); ok {
		err = tokenerr.Classify("open the token", err)
	}
	if err != nil {
		return nil, err
	}
	return &conn{tok: tok, cms: &signer.CMS{Key: tok, Cert: tok.Certificate(), Options: m.opts}}, nil
}

// connect opens the token and makes it the current one.
func (m *Manager) connect() error {
	m.mu.RLock()
	open, want := m.open, m.pinned
	m.mu.RUnlock()
	c, err := m.openConn(open, want)
	if err != nil {
		m.setState(State{Reason: err.Error(), Since: agentapi.At(time.Now()), PINRejected: isPINError(err)})
		return err
	}
	return m.install(c)
}

// install makes c the current connection; the one it replaces is closed
// once its signatures in flight are done.
func (m *Manager) install(c *conn) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		c.tok.Close()
		return errors.New("closed")
	}
	old := m.cur
	m.cur = c
	if t, ok := c.tok.(identified); ok {
		id := t.Identity()
		m.pinned = &id
	}
	m.state = State{Ready: true, Since: agentapi.At(time.Now()), Key: c.tok.Label(), Thumbprint: canonical.ThumbprintOf(c.tok.Certificate())}
	m.mu.Unlock()
	if old != nil {
		go old.close()
	}
	m.log.Info().Str("key", c.tok.Label()).Msg("token ready")
	return nil
}

func (m *Manager) setState(s State) {
	m.mu.Lock()
	m.state = s
	m.mu.Unlock()
}

// State returns the token's state. A nil manager is an agent without a
// token (OpenID Connect or legacy passwords alone): never ready.
func (m *Manager) State() State {
	if m == nil {
		return State{Reason: ErrNoToken.Error()}
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.state
}

// Certificate returns the signing certificate, or nil while not ready.
func (m *Manager) Certificate() *x509.Certificate {
	if m == nil {
		return nil
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cur == nil {
		return nil
	}
	return m.cur.cms.Cert
}

// QueueDepth is the number of token operations waiting or running.
func (m *Manager) QueueDepth() int {
	if m == nil {
		return 0
	}
	return m.q.depth()
}

// Dropped is the number of requests dropped because their deadline passed
// while they waited.
func (m *Manager) Dropped() int64 {
	if m == nil {
		return 0
	}
	return m.q.dropped.Load()
}

// SignText signs text through the queue (trusted.Signer).
func (m *Manager) SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error) {
	sig, _, err := m.Sign(ctx, text, ts)
	return sig, err
}

// Sign signs text through the queue and returns the signature with the
// certificate of the key that made it (the token may be replaced at any
// moment after).
func (m *Manager) Sign(ctx context.Context, text []byte, ts time.Time) ([]byte, *x509.Certificate, error) {
	if !m.State().Ready {
		return nil, nil, m.notReady() // at once: do not queue for a token that is out
	}
	var cert *x509.Certificate
	sig, err := m.q.do(ctx, func(ctx context.Context) ([]byte, error) {
		c := m.lease()
		if c == nil {
			return nil, m.notReady()
		}
		defer c.flight.Done()
		start := time.Now()
		if m.delay > 0 {
			time.Sleep(m.delay) // a slow card holds the worker, as a real one does
		}
		// The worker signs without watching the caller's ctx: the queue
		// already dropped the request if its deadline passed, the caller
		// stops waiting at its deadline whatever the token does
		// (queue.do), and the token's own deadline bounds the operation.
		sig, err := c.cms.SignText(context.WithoutCancel(ctx), text, ts)
		if m.onSign != nil {
			m.onSign(time.Since(start), err)
		}
		if _, ok := tokenerr.Code(err); ok {
			err = tokenerr.Classify("sign", err) // a bare CKR_ value: say what it means
		}
		if err != nil && tokenerr.Recoverable(err) {
			m.fail(c, err)
		}
		cert = c.cms.Cert
		return sig, err
	})
	if err != nil {
		return nil, nil, err
	}
	return sig, cert, nil
}

func (m *Manager) notReady() error {
	if m == nil {
		return ErrNoToken
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return fmt.Errorf("%w: %s", ErrNotReady, m.state.Reason)
}

// Reopen applies a new token selection (SIGHUP). With the same id while the
// token is ready it changes nothing. Otherwise the new selection is opened
// first, while the current key keeps signing, then swapped in; the old key
// is closed once its signatures in flight are done, so a reload never
// fails a request nor answers 503 meanwhile. The same id reopens only the
// token and key opened before; another id chooses its token afresh. When
// the new selection cannot be opened the current key stays (its error is
// returned); when the token was not ready, the new selection is retried in
// the background if the token may yet come.
func (m *Manager) Reopen(open Opener, id string) error {
	m.mu.Lock()
	same := id == m.id && m.cur != nil
	want := m.pinned
	if id != m.id {
		want = nil // a new selection chooses its token afresh
	}
	m.mu.Unlock()
	if same {
		return nil
	}
	c, err := m.openConn(open, want)
	m.mu.Lock()
	ready := m.cur != nil
	if err == nil || !ready {
		if id != m.id {
			m.pinned = nil
		}
		m.open, m.id = open, id // from now on, reconnects use the new selection
	}
	m.mu.Unlock()
	if err != nil {
		if !ready {
			m.setState(State{Reason: err.Error(), Since: agentapi.At(time.Now()), PINRejected: isPINError(err)})
			if canWaitFor(err) {
				m.startReconnect(err)
			}
		}
		return err
	}
	return m.install(c)
}

// Close stops reconnecting and closes the token. It does not wait for a
// token operation that does not return.
func (m *Manager) Close() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	first, c := !m.closed, m.cur
	if first {
		m.closed, m.cur = true, nil
		close(m.stop)
		m.state = State{Reason: "shutting down", Since: agentapi.At(time.Now())}
	}
	m.mu.Unlock()
	if !first {
		return nil // closed before
	}
	m.q.close()
	if c != nil {
		return c.tok.Close()
	}
	return nil
}

// SerialAdvice is, when sel chose tok's token without its serial (by
// label, or as the only token), a warning naming the key's URI with the
// serial: any token of that label would be taken at start, and the agent
// pins the one it took only from then on. "" otherwise, and for a token
// that is no PKCS#11 key.
func SerialAdvice(sel pkcs11.Selection, tok Token) string {
	k, ok := tok.(interface {
		Identity() pkcs11.Identity
		ID() []byte
	})
	if sel, err := sel.Complete(); !ok || err != nil || sel.Token.Serial != "" {
		return ""
	}
	id := k.Identity()
	if id.Serial == "" {
		return ""
	}
	keyURI := uri.Object(id.Label, id.Serial, "private", tok.Label(), k.ID())
	return fmt.Sprintf("the token is chosen without its serial, so any token labelled %q would be taken at start; name it by its serial: --key '%s' (or --token-serial %s)",
		id.Label, keyURI, id.Serial)
}
