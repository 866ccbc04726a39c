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
	// Bytes is the most bytes of one head, status line and blank line
	// included. Default DefaultHeadBytes.
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
// the answer); after a final head it is idle (the body is not counted)
// until armed again. It allocates nothing. Not safe for concurrent use.
type HeadCounter struct {
	limits HeadLimits // Bytes 0: bytes not counted
	state  uint8
	k      int // bytes of "HTTP/" seen
	fields int
	bytes  int64
	code   [4]byte // the status code, as far as read
	codeN  int
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

// Arm says an answer's head comes next (a request was written). The
// bounds are counted afresh; an error stays.
func (c *HeadCounter) Arm() {
	c.state, c.k, c.fields, c.bytes, c.codeN = hcSniff, 0, 0, 0, 0
}

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
		c.state = hcIdle
		return
	}
	c.Arm()
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// headConn counts the heads a Transport reads on a connection: a request
// written while it is idle arms it.
type headConn struct {
	net.Conn
	mu sync.Mutex // the Transport reads and writes on two goroutines
	hc HeadCounter
}

func (c *headConn) Read(p []byte) (int, error) {
	// Once failed, failed at once: net/http may take the failed read's
	// cut line for a whole one (ReadLine drops the error) and read on.
	if err := c.err(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		ok, serr := c.hc.Scan(p[:n])
		c.mu.Unlock()
		if serr != nil && ok == 0 {
			return 0, serr
		}
		if serr != nil {
			return ok, nil // the error with the next read
		}
	}
	return n, err
}

func (c *headConn) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hc.Err()
}

func (c *headConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.hc.Idle() {
		c.hc.Arm()
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
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
// fields are counted once parsed: the answer is refused the same.
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
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		return tc, nil // the Transport's HTTP/2 takes a *tls.Conn
	}
	return &headConn{Conn: tc, hc: NewHeadCounter(l)}, nil
}

// headCheck refuses an answer whose head has more fields than allowed,
// once parsed: what the counters could not see.
type headCheck struct {
	t      *http.Transport
	fields int
}

func (h headCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	// The counter's error is the cause when the Transport fails, but
	// net/textproto may report another: a line cut by the failed read
	// reads as a whole line (bufio.Reader.ReadLine drops the error that
	// ends it), which then lacks its colon.
	var conn *headConn
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conn, _ = i.Conn.(*headConn) }}
	resp, err := h.t.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if err != nil {
		if conn != nil {
			if herr := conn.err(); herr != nil {
				return nil, herr
			}
		}
		return nil, err
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
