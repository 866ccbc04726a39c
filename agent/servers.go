package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agent/access"
	"github.com/signagent/signagent/agent/listen"
)

// Listener is a socket the agent serves on and how its callers are
// authenticated.
type Listener struct {
	net.Listener
	Auth access.Authenticator
	// Path is the Unix socket's file, removed on shutdown ("" for TCP and
	// for sockets handed over by systemd, which owns them).
	Path string
}

// serverSet is one HTTP server per listener.
type serverSet struct {
	servers []*http.Server
	errs    chan error
}

// NewHTTPServer is the HTTP server every listener of the agent gets for
// h, before its connection context and error log: its timeouts and header
// limit (bench proxy's Go floor runs on the same). Short header and idle
// timeouts: a connection that sends nothing, or sits idle, gives its
// descriptor back soon.
func NewHTTPServer(h http.Handler, requestDeadline time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 3 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      requestDeadline + 5*time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

// startServers serves the API on every listener, each capped in its
// connections, and the metrics listener's routes on metrics (nil: none).
func (a *Agent) startServers(ls []Listener, metrics net.Listener) *serverSet {
	set := &serverSet{errs: make(chan error, len(ls)+1)}
	for _, l := range ls {
		if !listen.Capped(l.Listener) { // handed over by systemd
			max := listen.DefaultMaxConnsUnix
			if _, ok := l.Listener.Addr().(*net.TCPAddr); ok {
				max = listen.DefaultMaxConnsTCP
			}
			l.Listener = listen.Limit(l.Listener, max)
		}
		srv := NewHTTPServer(a.handler(l.Auth), a.cfg.RequestDeadline)
		srv.ConnContext = access.ConnContext
		// net/http's own complaints (a failed TLS handshake, a broken
		// connection) go to the diagnostic log, not bare to stderr.
		srv.ErrorLog = warnLog(a.cfg.Log.With().Str("component", "http").Logger())
		set.servers = append(set.servers, srv)
		go func(l Listener) {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				set.errs <- fmt.Errorf("serving on %s: %w", l.Addr(), err)
			}
		}(l)
	}
	if metrics != nil {
		srv := NewHTTPServer(a.metricsHandler(), a.cfg.RequestDeadline)
		srv.ErrorLog = warnLog(a.cfg.Log.With().Str("component", "http").Logger())
		set.servers = append(set.servers, srv)
		go func() {
			if err := srv.Serve(metrics); err != nil && !errors.Is(err, http.ErrServerClosed) {
				set.errs <- fmt.Errorf("serving metrics on %s: %w", metrics.Addr(), err)
			}
		}()
	}
	return set
}

// shutdown stops accepting and waits for requests in flight until ctx is
// done, then cuts the rest off.
func (set *serverSet) shutdown(ctx context.Context, log zerolog.Logger) {
	var wg sync.WaitGroup
	var cut atomic.Bool
	for _, srv := range set.servers {
		wg.Add(1)
		go func(srv *http.Server) {
			defer wg.Done()
			if err := srv.Shutdown(ctx); err != nil {
				cut.Store(true)
				srv.Close()
			}
		}(srv)
	}
	wg.Wait()
	if cut.Load() {
		log.Warn().Msg("requests still running at the end of the grace period were cut off")
	}
}
