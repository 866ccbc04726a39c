package httpx

import (
	"bytes"
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

// HeadCounter counts the header fields and bytes of the HTTP/1.x answer
// heads in the bytes read from a connection, before net/http's reader
// parses them, and fails the read that brings a head past its bounds. Armed
// (a head comes next), it takes the bytes that start with "HTTP/" for a
// head (any other, TLS records included, for no head: net/http refuses an
// answer that does not start so) and counts its lines as
// net/textproto.ReadMIMEHeader reads them: a line that starts with a space
// or a tab continues its field, an empty line (LF or CRLF) ends the head.
// After an interim answer (1xx but 101) or a status it cannot read, the
// next bytes are taken for another head (net/http reads one, or refuses
// the answer), its fields counted afresh and its bytes with the heads'
// before it; after a final head it is idle (the body is not counted)
// until armed again. It allocates nothing. Not safe for concurrent use.
type HeadCounter struct {
	limits HeadLimits // Bytes 0: bytes not counted
	state  uint8
	k      int // bytes of "HTTP/" seen
	fields int
	bytes  int64
	code   [4]byte // the status code, as far as read
	codeN  int
	done   bool // a final head was counted since Arm
	err    error
}

const (
	hcIdle      = iota
	hcSniff     // "HTTP/"
	hcProto     // the rest of the version, up to a space
	hcSpace     // spaces before the status code
	hcCode      // the status code
	hcReason    // the rest of the status line
	hcLineStart // the start of a field line (or of the blank line)
	hcLineCR    // a line that so far is a CR
	hcInLine    // within a field line
)

// NewHeadCounter counts heads within l (its Bytes 0: fields alone).
func NewHeadCounter(l HeadLimits) HeadCounter { return HeadCounter{limits: l} }

// Arm says an answer's heads come next (a request is written). The
// bounds are counted afresh; an error stays.
func (c *HeadCounter) Arm() {
	c.nextHead()
	c.bytes, c.done = 0, false
}

// nextHead: another head of the same answer comes next, its fields
// counted afresh, its bytes with the heads' before it.
func (c *HeadCounter) nextHead() { c.state, c.k, c.fields, c.codeN = hcSniff, 0, 0, 0 }

// Done reports whether the counter read an answer's final head since Arm.
func (c *HeadCounter) Done() bool { return c.done }

// Disarm stops counting until Arm.
func (c *HeadCounter) Disarm() { c.state = hcIdle }

// Idle reports whether the counter is not within a head nor expects one.
func (c *HeadCounter) Idle() bool { return c.state == hcIdle }

// Scan takes the next bytes read. Once a head passed a bound it returns
// a *HeadError (and does for every call after it) with the length of p's
// bytes before the one that passed it: given on, with the error only on
// the next read, they leave net/http a whole line to read before it
// (bufio.Reader.ReadLine drops the error that ends a line it cut) when
// the head passed its fields.
func (c *HeadCounter) Scan(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	for i := 0; i < len(p) && c.state != hcIdle; {
		start := i
		i = c.step(p, i)
		c.bytes += int64(i - start)
		if c.err != nil {
			return i, c.err
		}
		if c.limits.Bytes > 0 && c.bytes > c.limits.Bytes {
			c.err = &HeadError{Bytes: c.limits.Bytes}
			return i - int(c.bytes-c.limits.Bytes), c.err
		}
	}
	return len(p), nil
}

// Err is the error Scan returned, if any.
func (c *HeadCounter) Err() error { return c.err }

// Took is what a reader beneath a head parser returns for a read of
// p[:n] that gave err, counted by c: n and err; or, when the read brought
// a head past a bound, the bytes before the one that passed, the error
// with the next read (Scan), and the error at once when there are none.
// A reader calls it after each read, once it returned c.Err() (if any)
// without reading.
func (c *HeadCounter) Took(p []byte, n int, err error) (int, error) {
	if n <= 0 || c.state == hcIdle {
		return n, err
	}
	ok, serr := c.Scan(p[:n])
	switch {
	case serr == nil:
		return n, err
	case ok == 0:
		return 0, serr
	}
	return ok, nil
}

var httpPrefix = []byte("HTTP/")

// step takes p[i:] up to the next change of state (a whole line's rest
// at once) and returns where it stopped.
func (c *HeadCounter) step(p []byte, i int) int {
	b := p[i]
	switch c.state {
	case hcSniff:
		if c.k == 0 && bytes.HasPrefix(p[i:], httpPrefix) {
			c.k, c.state = len(httpPrefix), hcProto
			return i + len(httpPrefix)
		}
		if b != httpPrefix[c.k] {
			c.state = hcIdle // not a head: net/http refuses it, or it is TLS
			return i
		}
		if c.k++; c.k == len(httpPrefix) {
			c.state = hcProto
		}
	case hcProto:
		switch b {
		case ' ':
			c.state = hcSpace
		case '\n':
			c.endStatusLine()
		}
	case hcSpace:
		if b == ' ' {
			break
		}
		c.state = hcCode
		return i // the code's first byte
	case hcCode:
		switch {
		case b == ' ' || b == '\r':
			c.state = hcReason
		case b == '\n':
			c.endStatusLine()
		case c.codeN < len(c.code):
			c.code[c.codeN] = b
			c.codeN++
		}
	case hcReason:
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			return len(p)
		}
		c.endStatusLine()
		return i + j + 1
	case hcLineStart, hcLineCR:
		switch {
		case b == '\n':
			c.endHead()
		case b == '\r' && c.state == hcLineStart:
			c.state = hcLineCR
		case (b == ' ' || b == '\t') && c.state == hcLineStart:
			c.state = hcInLine // a continuation: the same field
		default:
			// A new field (a line that starts with CR and goes on is one
			// too, which net/http refuses).
			if c.fields++; c.fields > c.limits.Fields {
				c.err = &HeadError{Fields: c.limits.Fields}
				return i
			}
			c.state = hcInLine // b is the line's, and not its end
			return c.step(p, i)
		}
	case hcInLine:
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			return len(p)
		}
		c.state = hcLineStart
		return i + j + 1
	}
	return i + 1
}

func (c *HeadCounter) endStatusLine() { c.state = hcLineStart }

// endHead: after a final answer the body follows, not counted; after an
// interim one, or a status the counter cannot tell is final, another head.
func (c *HeadCounter) endHead() {
	code := c.code[:c.codeN]
	final := c.codeN == 3 && isDigit(code[0]) && isDigit(code[1]) && isDigit(code[2]) &&
		(code[0] != '1' || string(code) == "101")
	if final {
		c.state, c.done = hcIdle, true
		return
	}
	c.nextHead()
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

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
