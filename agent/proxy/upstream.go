package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/signagent/signagent/internal/httpx"
)

// upstream sends the proxy's requests to the business API over HTTP/1.1
// keep-alive connections of its own, writing the request and reading the
// answer on the caller's goroutine. http.Transport hands each request to a
// connection's reader and writer goroutines and back; under proxy load
// those hand-offs cost more than everything else the agent does per call
// (issue 26's profile). A request that must go through an HTTP proxy
// ($HTTPS_PROXY and kin) takes the standard transport instead.
type upstream struct {
	base     *url.URL
	addr     string            // host:port to dial
	fallback http.RoundTripper // when the environment names an HTTP proxy for base
	tls      *tls.Config
	dialer   net.Dialer

	headerTimeout time.Duration // for the answer's head
	maxHead       int64         // bytes of the answer's head, interim answers counted in it
	maxFields     int           // header fields of each head
	idleTimeout   time.Duration
	maxIdle       int
	// afterHead, when set (tests), runs between reading the head and
	// lifting the head's deadline.
	afterHead func()

	mu   sync.Mutex
	idle []*upConn // most recently used last
}

type upConn struct {
	net.Conn
	raw  net.Conn        // the TCP connection beneath TLS
	rc   syscall.RawConn // raw's, for the peek (nil: cannot peek)
	peek func(fd uintptr) bool
	open bool    // the last peek's answer
	one  [1]byte // the peek's buffer
	lr   *headLimit
	br   *bufio.Reader // reads through lr
	bw   *bufio.Writer
	used time.Time // when it was put back idle
}

// newUpstream sends to base, reading heads within l (zero values: the
// defaults); fallback takes the requests when the environment
// ($HTTPS_PROXY and kin, read once) names a proxy for base.
func newUpstream(base *url.URL, l httpx.HeadLimits, fallback http.RoundTripper) *upstream {
	l = l.OrDefault()
	u := &upstream{base: base, addr: base.Host, tls: &tls.Config{ServerName: base.Hostname(), MinVersion: tls.VersionTLS12},
		dialer:        net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second},
		headerTimeout: 30 * time.Second, maxHead: l.Bytes, maxFields: l.Fields, idleTimeout: 90 * time.Second, maxIdle: 64}
	if base.Port() == "" {
		port := "80"
		if base.Scheme == "https" {
			port = "443"
		}
		u.addr = net.JoinHostPort(base.Hostname(), port)
	}
	if fallback != nil {
		if p, err := http.ProxyFromEnvironment(&http.Request{URL: base}); err != nil || p != nil {
			u.fallback = fallback
		}
	}
	return u
}

// RoundTrip sends req on an idle connection, or a new one.
//
// A kept connection carries one answer at a time, and a byte on it that
// no request asked for would be read as the next caller's answer (one
// identity's data handed to another). So, as http.Transport, nginx's
// upstream keepalive and Envoy do, a connection goes back to the pool only
// when its answer was framed and read to its end with nothing after it,
// and one is taken from the pool only when it is still open and quiet:
// bytes that came while it was idle (a second answer, the rest of an
// answer longer than it said, a 408 before the service closed it) cost
// the connection, never a caller. A request that may be sent twice (GET,
// HEAD, OPTIONS, TRACE, or one with an Idempotency-Key) is sent once more
// on a new connection when a kept one turns out closed by the service
// before any of the answer came, or answers 408 and closes (the service
// timed the idle connection out as the request went).
func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if u.fallback != nil {
		return u.fallback.RoundTrip(req)
	}
	replayable := req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		replayable = true
	}
	for attempt := 0; ; attempt++ {
		c, reused, err := u.get(req.Context())
		if err != nil {
			return nil, err
		}
		resp, err := u.send(c, req)
		if err == nil && reused && resp.StatusCode == http.StatusRequestTimeout && resp.Close {
			// The service's idle timeout crossed the request: it did not
			// take the request, so a replayable one goes on a new
			// connection; another is answered 408, which is true.
			if !replayable || attempt > 0 {
				return resp, nil
			}
			resp.Body.Close()
			err = errStaleConn
		}
		if err == nil {
			return resp, nil
		}
		c.Close()
		if !reused || !replayable || attempt > 0 || !errors.Is(err, errStaleConn) || req.Context().Err() != nil {
			return nil, err
		}
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return nil, err
			}
			if req.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
	}
}

// quiet asks, without blocking, whether a kept connection is still open
// and has nothing to read: bytes in its buffer, in TLS's, or in the
// kernel's, or the end of the stream, mean it is not to be used.
func quiet(c *upConn) bool {
	if c.br.Buffered() > 0 || !c.alive() {
		return false
	}
	tc, ok := c.Conn.(*tls.Conn)
	if !ok {
		return true
	}
	// Decrypted bytes TLS holds but nobody read: a read that cannot wait
	// (a deadline already past) returns them, or times out when there
	// are none. A timeout leaves the TLS connection usable.
	tc.SetReadDeadline(time.Unix(1, 0))
	var b [1]byte
	n, err := tc.Read(b[:])
	tc.SetReadDeadline(time.Time{})
	var ne net.Error
	return n == 0 && errors.As(err, &ne) && ne.Timeout()
}

// alive asks the kernel, without blocking, whether the connection is
// still open and quiet: a peek that would block means so; the end of the
// stream, an error, or bytes nobody asked for mean it is not. It
// allocates nothing: it runs twice on every proxied call.
func (c *upConn) alive() bool {
	if c.rc == nil {
		return true
	}
	c.open = true
	c.rc.Read(c.peek)
	return c.open
}

// peekOnce is alive's look, as the raw connection's Read wants it.
func (c *upConn) peekOnce(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), c.one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	c.open = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
	return true // never wait
}

// errStaleConn is a connection that closed before any of the answer came.
var errStaleConn = errors.New("the connection closed before the answer")

func (u *upstream) send(c *upConn, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	// The request's deadline ends the wait through the context (stop's
	// function), so the connection gets a deadline of its own only when
	// the head timeout comes first: a deadline set and cleared per call
	// is a runtime timer changed four times, and each change may wake an
	// idle thread to watch it (issue 26's profile at concurrency 1).
	timed := false
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > u.headerTimeout {
		c.SetDeadline(time.Now().Add(u.headerTimeout))
		timed = true
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	if err := writeRequest(c.bw, req, u.base.Host); err != nil {
		stop()
		return nil, staleOr(err)
	}
	if err := c.bw.Flush(); err != nil {
		stop()
		return nil, staleOr(err)
	}
	resp, err := u.readHead(c, req)
	if err != nil {
		stop()
		return nil, err
	}
	if timed {
		if u.afterHead != nil {
			u.afterHead()
		}
		// The body streams within the request's deadline (if any), not
		// the head's. Were the request cancelled meanwhile, stop's
		// function may have set its deadline just before this clears it:
		// set again, so that the body's read does not go on with none.
		c.SetDeadline(time.Time{})
		if ctx.Err() != nil {
			c.SetDeadline(time.Unix(1, 0))
		}
	}
	resp.Body = &upBody{ReadCloser: resp.Body, c: c, u: u, stop: stop, keep: keepAfter(resp, req),
		eof: resp.Body == http.NoBody}
	return resp, nil
}

// keepAfter says whether resp's connection may carry another request once
// its body was read to its end: not when either side said close, nor
// after a 101 (the connection is another protocol's now), nor after a
// 204 or 304 whose head gave a body length (the bytes it announced may
// follow, and the next caller would read them).
func keepAfter(resp *http.Response, req *http.Request) bool {
	if resp.Close || req.Close || resp.StatusCode < 200 {
		return false
	}
	if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		_, length := resp.Header["Content-Length"]
		if (length && resp.Header.Get("Content-Length") != "0") || len(resp.TransferEncoding) > 0 || resp.Header.Get("Transfer-Encoding") != "" {
			return false
		}
	}
	return true
}

// writeRequest writes req as http.Request.Write does for what the proxy
// sends (a request line, Host, the headers, Content-Length when there is a
// body or the method expects one, the body), without its per-call
// sorting and formatting: it was a twentieth of the agent's work on a
// proxied call. The headers come from the agent's own server, which
// refused invalid names and values; a value is still trimmed and a line
// break in it made a space, as Request.Write does.
func writeRequest(w *bufio.Writer, req *http.Request, host string) error {
	w.WriteString(req.Method)
	w.WriteByte(' ')
	w.WriteString(req.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	if ua := req.Header.Get("User-Agent"); ua != "" {
		writeField(w, "User-Agent", ua)
	}
	for k, vv := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer", "Connection":
			continue
		}
		for _, v := range vv {
			writeField(w, k, v)
		}
	}
	if req.Close {
		w.WriteString("Connection: close\r\n")
	}
	hasBody := req.Body != nil && req.Body != http.NoBody && req.ContentLength > 0
	if hasBody || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.FormatInt(max(req.ContentLength, 0), 10))
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	if hasBody {
		n, err := io.Copy(w, req.Body)
		if err != nil {
			return err
		}
		if n != req.ContentLength {
			return fmt.Errorf("the request body was %d bytes, not the %d announced", n, req.ContentLength)
		}
	}
	return nil
}

func writeField(w *bufio.Writer, k, v string) {
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	w.WriteString(k)
	w.WriteString(": ")
	w.WriteString(textproto.TrimString(v))
	w.WriteString("\r\n")
}

// staleOr marks the errors of a connection the service closed.
func staleOr(err error) error {
	var ne net.Error
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		(errors.As(err, &ne) && !ne.Timeout()) {
		return errors.Join(errStaleConn, err)
	}
	return err
}

// upBody gives the connection back to the pool once the answer was read
// to its end, and closes it otherwise.
type upBody struct {
	io.ReadCloser
	c    *upConn
	u    *upstream
	stop func() bool
	keep bool
	eof  bool
	done bool
}

func (b *upBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *upBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	err := b.ReadCloser.Close()
	if !b.stop() || !b.eof || !b.keep || !quiet(b.c) {
		// Cancelled, not read to its end, told to close, or more came
		// than the answer: the connection is not kept.
		b.c.Close()
		return err
	}
	b.u.put(b.c)
	return err
}

func (u *upstream) get(ctx context.Context) (*upConn, bool, error) {
	now := time.Now()
	u.mu.Lock()
	for len(u.idle) > 0 {
		c := u.idle[len(u.idle)-1]
		u.idle = u.idle[:len(u.idle)-1]
		if now.Sub(c.used) >= u.idleTimeout {
			c.Close()
			continue
		}
		u.mu.Unlock()
		if quiet(c) {
			return c, true, nil
		}
		c.Close() // closed by the service, or it wrote while idle
		u.mu.Lock()
	}
	u.mu.Unlock()
	nc, err := u.dialer.DialContext(ctx, "tcp", u.addr)
	if err != nil {
		return nil, false, err
	}
	raw := nc
	if u.base.Scheme == "https" {
		tc := tls.Client(nc, u.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, false, err
		}
		nc = tc
	}
	lr := u.newHeadLimit(nc)
	c := &upConn{Conn: nc, raw: raw, lr: lr, br: bufio.NewReaderSize(lr, 16<<10), bw: bufio.NewWriterSize(nc, 8<<10)}
	if sc, ok := raw.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			c.rc, c.peek = rc, c.peekOnce
		}
	}
	return c, false, nil
}

func (u *upstream) put(c *upConn) {
	c.used = time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.idle) >= u.maxIdle {
		c.Close()
		return
	}
	u.idle = append(u.idle, c)
}

// CloseIdleConnections closes the pooled connections (reload to another
// address, shutdown).
func (u *upstream) CloseIdleConnections() {
	u.mu.Lock()
	idle := u.idle
	u.idle = nil
	u.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}
