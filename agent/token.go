package agent

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/api"
	"github.com/signagent/signagent/pkcs11"
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
// in a closure is one.
type Opener func(ctx context.Context) (Token, error)

// checker is a Token that can say whether it is still there (pkcs11.Key).
type checker interface {
	Check(ctx context.Context) error
}

// ErrTokenNotReady is returned while the token is out or reconnecting.
var ErrTokenNotReady = errors.New("the token is not ready")

// TokenState is the token's state as /readyz reports it.
type TokenState = api.TokenState

// TokenManager owns the token: it signs through a bounded queue, notices
// when the token goes away, answers at once while it is out, and reconnects
// with backoff until it is back.
type TokenManager struct {
	open    Opener
	opts    signer.Options
	log     zerolog.Logger
	q       *queue
	backoff [2]time.Duration // first, max
	delay   time.Duration    // added to each signature (slow-card mode)
	onSign  func(time.Duration, error)
	timeout time.Duration // bounds an open and a check
	every   time.Duration // how often an idle token is checked

	mu           sync.RWMutex
	tok          Token
	cms          *signer.CMS
	state        TokenState
	reconnecting bool
	closed       bool
	stop         chan struct{}
}

// TokenOptions configures a TokenManager.
type TokenOptions struct {
	Open          Opener
	Signature     signer.Options
	Workers       int           // concurrent token operations (default 1)
	Backlog       int           // requests that may wait (default 64)
	BackoffFirst  time.Duration // first reconnect delay (default 100ms)
	BackoffMax    time.Duration // longest reconnect delay (default 1s)
	Delay         time.Duration // slow-card mode: added to every signature
	OpenTimeout   time.Duration // bounds opening the token and each check (default 30s)
	CheckEvery    time.Duration // how often the token is asked whether it is there (default 2s; <0: never)
	Log           zerolog.Logger
	OnSign        func(time.Duration, error) // observes each signature (metrics)
	OnStateChange func(TokenState)
}

// NewTokenManager opens the token (failing only for a wrong PIN or a
// selection that cannot work; a missing token is retried in the
// background).
func NewTokenManager(o TokenOptions) (*TokenManager, error) {
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
		o.CheckEvery = 2 * time.Second
	}
	m := &TokenManager{open: o.Open, opts: o.Signature, log: o.Log, q: newQueue(o.Workers, o.Backlog),
		backoff: [2]time.Duration{o.BackoffFirst, o.BackoffMax}, delay: o.Delay, onSign: o.OnSign,
		timeout: o.OpenTimeout, every: o.CheckEvery, stop: make(chan struct{})}
	m.state = TokenState{Reason: "starting", Since: time.Now()}
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

// watch asks the token every so often whether it is still there, so that
// /readyz and the metric tell the truth about an idle agent too: a token
// that was removed, or that does not answer within the deadline, is marked
// not ready and reconnected.
func (m *TokenManager) watch() {
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.mu.RLock()
		tok, cms := m.tok, m.cms
		m.mu.RUnlock()
		c, ok := tok.(checker)
		if !ok || cms == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
		err := c.Check(ctx)
		cancel()
		if err != nil && pkcs11.Recoverable(err) {
			m.fail(cms, err)
		}
	}
}

func (m *TokenManager) connect() error {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	tok, err := m.open(ctx)
	if _, ok := pkcs11.Code(err); ok {
		err = pkcs11.Classify("open the token", err)
	}
	if err != nil {
		m.setState(TokenState{Reason: err.Error(), Since: time.Now(), PINRejected: isPINError(err)})
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		tok.Close()
		return errors.New("closed")
	}
	m.tok = tok
	m.cms = &signer.CMS{Key: tok, Cert: tok.Certificate(), Options: m.opts}
	m.state = TokenState{Ready: true, Since: time.Now(), Key: tok.Label(), Thumbprint: pkcs11.Thumbprint(tok.Certificate())}
	m.mu.Unlock()
	m.log.Info().Str("key", tok.Label()).Msg("token ready")
	return nil
}

// canWaitFor reports whether the agent should keep trying to open the
// token after err: the token is out (not inserted yet, removed, its session
// broken), rather than refusing the PIN or being misconfigured.
func canWaitFor(err error) bool {
	return pkcs11.Recoverable(err) || errors.Is(err, pkcs11.ErrTokenNotFound)
}

func isPINError(err error) bool {
	return errors.Is(err, pkcs11.ErrPINIncorrect) || errors.Is(err, pkcs11.ErrPINLocked) || errors.Is(err, pkcs11.ErrPINMissing)
}

func (m *TokenManager) setState(s TokenState) {
	m.mu.Lock()
	m.state = s
	m.mu.Unlock()
}

// State returns the token's state.
func (m *TokenManager) State() TokenState {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.state
}

// Certificate returns the signing certificate, or nil while not ready.
func (m *TokenManager) Certificate() *x509.Certificate {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cms == nil {
		return nil
	}
	return m.cms.Cert
}

// QueueDepth is the number of token operations waiting or running.
func (m *TokenManager) QueueDepth() int { return m.q.depth() }

// Dropped is the number of requests dropped because their deadline passed
// while they waited.
func (m *TokenManager) Dropped() int64 { return m.q.dropped.Load() }

// SignText signs text through the queue (trusted.Signer).
func (m *TokenManager) SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error) {
	sig, _, err := m.Sign(ctx, text, ts)
	return sig, err
}

// Sign signs text through the queue and returns the signature with the
// certificate of the key that made it (the token may be replaced at any
// moment after).
func (m *TokenManager) Sign(ctx context.Context, text []byte, ts time.Time) ([]byte, *x509.Certificate, error) {
	m.mu.RLock()
	ready, cms, reason := m.state.Ready, m.cms, m.state.Reason
	m.mu.RUnlock()
	if !ready {
		return nil, nil, fmt.Errorf("%w: %s", ErrTokenNotReady, reason)
	}
	sig, err := m.q.do(ctx, func(ctx context.Context) ([]byte, error) {
		start := time.Now()
		if m.delay > 0 {
			time.Sleep(m.delay) // a slow card holds the worker, as a real one does
		}
		// The worker signs without watching ctx: the queue already dropped
		// the request if its deadline passed, and the caller stops waiting
		// at its deadline whatever the token does (queue.do). Watching ctx
		// here too would cost another goroutine hand-off per signature.
		sig, err := cms.SignText(context.WithoutCancel(ctx), text, ts)
		if m.onSign != nil {
			m.onSign(time.Since(start), err)
		}
		if _, ok := pkcs11.Code(err); ok {
			err = pkcs11.Classify("sign", err) // a bare CKR_ value: say what it means
		}
		if err != nil && pkcs11.Recoverable(err) {
			m.fail(cms, err)
		}
		return sig, err
	})
	if err != nil {
		return nil, nil, err
	}
	return sig, cms.Cert, nil
}

// fail marks the token not ready after err from the token behind cms, and
// starts reconnecting. Failures of an older connection are ignored.
func (m *TokenManager) fail(cms *signer.CMS, err error) {
	m.mu.Lock()
	if m.cms != cms || !m.state.Ready {
		m.mu.Unlock()
		return
	}
	tok := m.tok
	m.tok, m.cms = nil, nil
	m.state = TokenState{Reason: err.Error(), Since: time.Now()}
	m.mu.Unlock()
	m.log.Error().Err(err).Msg("lost the token; answering 503 until it is back")
	go tok.Close() // may block on a dead device; do not hold up callers
	m.startReconnect(err)
}

func (m *TokenManager) startReconnect(cause error) {
	m.mu.Lock()
	if m.reconnecting || m.closed || isPINError(cause) {
		m.mu.Unlock()
		if isPINError(cause) {
			m.log.Error().Err(cause).Msg("the token refused the PIN; not retrying (a card locks after a few tries): fix the PIN and send SIGHUP")
		}
		return
	}
	m.reconnecting = true
	m.mu.Unlock()
	go m.reconnect()
}

func (m *TokenManager) reconnect() {
	defer func() {
		m.mu.Lock()
		m.reconnecting = false
		m.mu.Unlock()
	}()
	wait := m.backoff[0]
	for attempt := 1; ; attempt++ {
		select {
		case <-m.stop:
			return
		case <-time.After(wait):
		}
		err := m.connect()
		if err == nil {
			m.log.Info().Int("attempts", attempt).Msg("the token is back")
			return
		}
		// Anything but a refused PIN is retried: while a token comes back,
		// the module may not find it, or find it without its key, for a while.
		if isPINError(err) {
			m.log.Error().Err(err).Msg("the token refused the PIN; not retrying (a card locks after a few tries): fix the PIN and send SIGHUP")
			return
		}
		m.log.Debug().Err(err).Dur("next", wait).Msg("the token is still out")
		wait = min(wait*2, m.backoff[1])
	}
}

// Reopen closes the token and connects again (SIGHUP), so that a fixed PIN
// or a new key selection takes effect.
func (m *TokenManager) Reopen(open Opener) error {
	m.mu.Lock()
	if open != nil {
		m.open = open
	}
	tok := m.tok
	m.tok, m.cms = nil, nil
	m.state = TokenState{Reason: "reopening", Since: time.Now()}
	m.mu.Unlock()
	if tok != nil {
		tok.Close()
	}
	err := m.connect()
	if err != nil && canWaitFor(err) {
		m.startReconnect(err)
	}
	return err
}

// Close stops reconnecting, waits for nothing more, and closes the token.
func (m *TokenManager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.stop)
	tok := m.tok
	m.tok, m.cms = nil, nil
	m.state = TokenState{Reason: "shutting down", Since: time.Now()}
	m.mu.Unlock()
	m.q.close()
	if tok != nil {
		return tok.Close()
	}
	return nil
}
