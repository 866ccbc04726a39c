package httpx

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/signagent/signagent/errdefs"
)

// What an answer's head costs to hold is its fields more than its bytes:
// net/http keeps each field as a map entry, a key and a value (about 400
// bytes for "a:b"), so that 1 MiB of tiny fields took 47 MiB to hold
// (issue 45). net/http bounds a head by its bytes alone
// (MaxResponseHeaderBytes); a HeadCounter beneath its reader bounds the
// fields too, before net/http parses them.

// HeadLimits bound one answer head: its header fields and its bytes.
type HeadLimits struct {
	// Fields is the most header fields of one head (a continuation line is
	// part of its field, as net/http reads it). Default DefaultHeadFields.
	Fields int
	// Bytes is the most bytes of one answer's heads, its interim heads
	// (100 Continue, 103 Early Hints) and its final one counted together,
	// each one's status line and blank line included (as http.Transport
	// counts MaxResponseHeaderBytes). Default DefaultHeadBytes.
	Bytes int64
}

const (
	// DefaultHeadFields is Envoy's max_headers_count: a service's head
	// has a dozen or two.
	DefaultHeadFields = 100
	// DefaultHeadBytes is 64 KiB of head (nginx reads 4 to 8 KiB of an
	// upstream's head, Envoy 60 KiB).
	DefaultHeadBytes = 64 << 10
)

// OrDefault is l with each bound not given (zero or less) at its default.
func (l HeadLimits) OrDefault() HeadLimits {
	if l.Fields <= 0 {
		l.Fields = DefaultHeadFields
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultHeadBytes
	}
	return l
}

// HeadError is an answer head past a client's HeadLimits: the answer is
// refused and its connection closed. Its kind is errdefs.ErrUnreachable
// (the peer answered what cannot be used).
type HeadError struct {
	// Fields is the bound on fields that the head passed, or Bytes the
	// one on bytes (the other is 0).
	Fields int
	Bytes  int64
	// Setting names what raises the bound, when something does
	// ("--service-max-header-fields").
	Setting string
}

// Error reads "a head of more than 100 header fields, more than signagent
// reads", to follow "PEER answered".
func (e *HeadError) Error() string {
	s := fmt.Sprintf("a head of more than %d header fields", e.Fields)
	if e.Fields == 0 {
		s = "a head larger than " + sizeText(e.Bytes)
	}
	if e.Setting != "" {
		return s + ", past " + e.Setting
	}
	return s + ", more than signagent reads"
}

// Is gives the error its kind.
func (e *HeadError) Is(target error) bool { return target == errdefs.ErrUnreachable }

// headConn counts the heads a Transport reads on a connection: the
// request's round trip arms it once it has the connection (headCheck).
type headConn struct {
	net.Conn
	tls *tls.ConnectionState // an HTTPS connection's, for its answers
	// state is the counter's, for the reads that need not lock: armed
	// (within a head or before one), failed, or idle.
	state atomic.Uint32
	mu    sync.Mutex // the Transport reads and arms on two goroutines
	hc    HeadCounter
}

const (
	connIdle = iota
	connArmed
	connFailed
)

func (c *headConn) Read(p []byte) (int, error) {
	// Once failed, failed at once: net/http may take the failed read's
	// cut line for a whole one (ReadLine drops the error) and read on.
	if c.state.Load() == connFailed {
		return 0, c.hc.Err() // set before the state said so
	}
	n, err := c.Conn.Read(p)
	if n <= 0 || c.state.Load() != connArmed {
		return n, err // a body's bytes, or none
	}
	c.mu.Lock()
	n, err = c.hc.Took(p, n, err)
	c.setState()
	c.mu.Unlock()
	return n, err
}

// setState is the counter's state, c.mu held.
func (c *headConn) setState() {
	switch {
	case c.hc.Err() != nil:
		c.state.Store(connFailed)
	case c.hc.Idle():
		c.state.Store(connIdle)
	default:
		c.state.Store(connArmed)
	}
}

// arm says a request is to be written on c: its answer's heads come
// next.
func (c *headConn) arm() {
	c.mu.Lock()
	c.hc.Arm()
	c.setState()
	c.mu.Unlock()
}

// result is whether the counter counted the final head of the answer
// since arm, and its error, if any.
func (c *headConn) result() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hc.Done(), c.hc.Err()
}

// BoundHeads makes t read every answer head within l (zero values: the
// defaults) and returns it wrapped in the check of what it gave.
//
// An HTTP/1.x head is counted as it is read, before net/http parses it:
// the connections t dials are wrapped (for https t's TLS is done by the
// dial, so that the counter sees the plain bytes; a connection that
// negotiated HTTP/2 is not wrapped: its heads are bounded by
// MaxResponseHeaderBytes, which HTTP/2 counts with 32 bytes more per
// field, so at most 2,048 fields in 64 KiB). What is not counted before
// (HTTP/2, HTTPS through a proxy, a head in the bytes a Transport read
// before the request that takes them) is bounded by its bytes, and its
// fields are counted once parsed: the answer is refused the same. An
// HTTPS answer's TLS is its connection's state, as t's own dial gives.
func BoundHeads(t *http.Transport, l HeadLimits) http.RoundTripper {
	l = l.OrDefault()
	// One byte more than the counter's bound, so that the counter, which
	// says what passed, sees a head of l.Bytes+1 first.
	t.MaxResponseHeaderBytes = l.Bytes + 1
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &headConn{Conn: c, hc: NewHeadCounter(l)}, nil
	}
	//lint:ignore SA1019 a caller's own DialTLS (deprecated, still honoured by net/http) is left to it
	if t.DialTLSContext == nil && t.DialTLS == nil {
		t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialTLS(ctx, t, dial, network, addr, l)
		}
	}
	return headCheck{t: t, fields: l.Fields}
}

// dialTLS does what Transport does when it dials https itself (its
// TLSClientConfig, with the host as ServerName when it names none, its
// handshake timeout), and wraps an HTTP/1.1 connection in a counter.
func dialTLS(ctx context.Context, t *http.Transport, dial func(context.Context, string, string) (net.Conn, error), network, addr string, l HeadLimits) (net.Conn, error) {
	raw, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	// The Transport set its NextProtos (h2 when it speaks HTTP/2) before
	// its first dial.
	cfg := t.TLSClientConfig.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		if cfg.ServerName, _, err = net.SplitHostPort(addr); err != nil {
			cfg.ServerName = addr
		}
	}
	tc := tls.Client(raw, cfg)
	hctx := ctx
	if t.TLSHandshakeTimeout > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, t.TLSHandshakeTimeout)
		defer cancel()
	}
	if err := tc.HandshakeContext(hctx); err != nil {
		raw.Close()
		return nil, err
	}
	cs := tc.ConnectionState()
	if cs.NegotiatedProtocol == "h2" {
		return tc, nil // the Transport's HTTP/2 takes a *tls.Conn
	}
	// The Transport gives its answers the state of a *tls.Conn only:
	// headCheck gives them this one.
	return &headConn{Conn: tc, tls: &cs, hc: NewHeadCounter(l)}, nil
}

// headCheck arms the counter of the connection each request gets, and
// refuses an answer whose head has more fields than allowed, once
// parsed, when the counter did not count it (HTTP/2, HTTPS through a
// proxy, a head read before the request).
type headCheck struct {
	t      *http.Transport
	fields int
}

// roundTrip is one request's: the connection it got.
type roundTrip struct {
	trace httptrace.ClientTrace
	conn  *headConn
}

func (r *roundTrip) gotConn(i httptrace.GotConnInfo) {
	// A request sent again on another connection gets it here again.
	if r.conn, _ = i.Conn.(*headConn); r.conn != nil {
		r.conn.arm()
	}
}

func (h headCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	rt := &roundTrip{}
	rt.trace.GotConn = rt.gotConn
	resp, err := h.t.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), &rt.trace)))
	var herr error
	counted := false
	if rt.conn != nil {
		counted, herr = rt.conn.result()
	}
	if err != nil {
		// The counter's error is the cause when the Transport fails, but
		// net/textproto may report another: a line cut by the failed
		// read reads as a whole line (bufio.Reader.ReadLine drops the
		// error that ends it), which then lacks its colon.
		if herr != nil {
			return nil, herr
		}
		return nil, err
	}
	if rt.conn != nil && resp.TLS == nil {
		resp.TLS = rt.conn.tls
	}
	if counted {
		return resp, nil
	}
	n := 0
	for _, vv := range resp.Header {
		n += len(vv)
	}
	if n > h.fields {
		resp.Body.Close()
		return nil, &HeadError{Fields: h.fields}
	}
	return resp, nil
}

// Transport is the Transport beneath.
func (h headCheck) Transport() *http.Transport { return h.t }

// CloseIdleConnections closes the Transport's idle connections.
func (h headCheck) CloseIdleConnections() { h.t.CloseIdleConnections() }

// sizeText is n in bytes, KiB or MiB, as a person writes it.
func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
