package tokenq

import (
	"context"
	"errors"
	"time"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// This file is how the manager notices that its token went away and
// reconnects: the idle check, the failures that start a reconnect, and
// the reconnect loop with its backoff.

// watch asks the token every so often whether it is still there, so that
// /readyz and the metric tell the truth about an idle agent too: a token
// that was removed, or that does not answer within the deadline, is marked
// not ready and reconnected.
func (m *Manager) watch() {
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		c := m.lease()
		if c == nil {
			continue
		}
		if ch, ok := c.tok.(checker); ok {
			ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
			err := ch.Check(ctx)
			cancel()
			if err != nil && tokenerr.Recoverable(err) {
				m.fail(c, err)
			}
		}
		c.flight.Done()
	}
}

// canWaitFor reports whether the agent should keep trying to open the
// token after err: the token is out (not inserted yet, removed, its session
// broken), rather than refusing the PIN or being misconfigured.
func canWaitFor(err error) bool {
	return tokenerr.Recoverable(err) || errors.Is(err, tokenerr.ErrTokenNotFound) || errors.Is(err, pkcs11.ErrOtherToken)
}

// isPINError reports whether err is about the PIN: it is then not sent
// again on its own. A login that failed without naming the PIN counts (the
// card may have counted a wrong try).
func isPINError(err error) bool {
	return errors.Is(err, tokenerr.ErrPINIncorrect) || errors.Is(err, tokenerr.ErrPINLocked) ||
		errors.Is(err, tokenerr.ErrPINMissing) || errors.Is(err, tokenerr.ErrPINFinalTry) ||
		errors.Is(err, tokenerr.ErrLoginFailed)
}

// fail marks the token not ready after err from connection c, and starts
// reconnecting. Failures of an older connection are ignored.
func (m *Manager) fail(c *conn, err error) {
	m.mu.Lock()
	if m.cur != c {
		m.mu.Unlock()
		return
	}
	m.cur = nil
	m.state = State{Reason: err.Error(), Since: agentapi.At(time.Now())}
	m.mu.Unlock()
	m.log.Error().Err(err).Msg("lost the token; answering 503 until it is back")
	go c.tok.Close() // the key is lost: its operations fail at once; do not hold up callers
	m.startReconnect(err)
}

func (m *Manager) startReconnect(cause error) {
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

func (m *Manager) reconnect() {
	defer func() {
		m.mu.Lock()
		m.reconnecting = false
		m.mu.Unlock()
	}()
	wait := m.backoff[0]
	var said string // the last other token's line logged
	for attempt := 1; ; attempt++ {
		select {
		case <-m.stop:
			return
		case <-time.After(wait):
		}
		if m.State().Ready {
			return // a reload connected meanwhile
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
		if errors.Is(err, pkcs11.ErrOtherToken) && err.Error() != said {
			said = err.Error()
			m.log.Error().Err(err).Msg("another token is in this agent's token's place; answering 503 until this agent's is back")
		} else {
			m.log.Debug().Err(err).Dur("next", wait).Msg("the token is still out")
		}
		wait = min(wait*2, m.backoff[1])
	}
}
