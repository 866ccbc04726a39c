package bench

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/errdefs"
)

// The Go floor is the least a proxy written on Go's HTTP server can do for
// bench proxy's call: the same server (FloorServer, the agent's), a
// bearer check, a fixed Authorization header, and the answer read over a
// pooled keep-alive connection on the handler's own goroutine, as the
// agent's proxy does; nothing else (no identity, audit, metrics, body
// budget or deadline). Measured beside nginx and the agent in one run, it
// tells what Go's server costs from what the agent's own work costs.
type floorProxy struct {
	upstream string
	want     []byte // "Bearer " + the bearer token
	mu       sync.Mutex
	idle     []*floorConn
}

type floorConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

// FloorProxy is the Go floor's handler: a GET with the bearer is passed to
// upstream (host:port) with "Authorization: Bearer upstream" and its
// answer passed back; a call without the bearer gets 401, one with a body
// or another method 405 (bench proxy sends neither).
func FloorProxy(upstream, bearer string) http.Handler {
	return &floorProxy{upstream: upstream, want: []byte("Bearer " + bearer)}
}

var floorBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (p *floorProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), p.want) != 1 {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodGet || r.ContentLength != 0 {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	c, err := p.conn(r.Context())
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	c.bw.WriteString("GET ")
	c.bw.WriteString(r.URL.RequestURI())
	c.bw.WriteString(" HTTP/1.1\r\nHost: ")
	c.bw.WriteString(p.upstream)
	c.bw.WriteString("\r\nAuthorization: Bearer upstream\r\n\r\n")
	var resp *http.Response
	if err = c.bw.Flush(); err == nil {
		resp, err = http.ReadResponse(c.br, r)
	}
	if err != nil {
		c.c.Close()
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	h := w.Header()
	for k, v := range resp.Header {
		if k != "Connection" && k != "Keep-Alive" {
			h[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	buf := floorBuffers.Get().(*[]byte)
	_, err = io.CopyBuffer(w, resp.Body, *buf)
	floorBuffers.Put(buf)
	resp.Body.Close()
	if err != nil || resp.Close {
		c.c.Close()
		return
	}
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// conn is an idle upstream connection, or a new one.
func (p *floorProxy) conn(ctx context.Context) (*floorConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	nc, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", p.upstream)
	if err != nil {
		return nil, err
	}
	return &floorConn{nc, bufio.NewReader(nc), bufio.NewWriter(nc)}, nil
}

// FloorServer is the Go floor's server: the agent's own
// (agent.NewHTTPServer, its default deadline), so that the two differ in
// the handler only.
func FloorServer(h http.Handler) *http.Server {
	return agent.NewHTTPServer(h, agent.DefaultRequestDeadline)
}

// ServeFloor serves the Go floor on addr until ctx ends; addr and upstream
// are loopback addresses only.
func ServeFloor(ctx context.Context, addr, upstream, bearer string) error {
	for _, a := range []string{addr, upstream} {
		if !loopback(a) {
			return fmt.Errorf("%w: the benchmark's Go floor listens on and calls loopback addresses only, not %q", errdefs.ErrInvalidInput, a)
		}
	}
	if bearer == "" {
		return fmt.Errorf("%w: the benchmark's Go floor needs a bearer token", errdefs.ErrInvalidInput)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := FloorServer(FloorProxy(upstream, bearer))
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
