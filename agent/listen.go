package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/trusted"
)

// Listener is a socket the agent serves on and how its callers are
// authenticated.
type Listener struct {
	net.Listener
	Auth Authenticator
	// Path is the Unix socket's file, removed on shutdown ("" for TCP and
	// for sockets handed over by systemd, which owns them).
	Path string
}

// ErrInsecureListen is returned for a TCP address beyond loopback without TLS.
var ErrInsecureListen = errors.New("refusing to listen beyond loopback without TLS")

// UnixSocket describes a Unix socket to create.
type UnixSocket struct {
	Path string
	// Group, when set, owns the socket, which is then mode 0660 instead of 0600.
	Group int
	// HasGroup says Group is set (gid 0 is a valid group).
	HasGroup bool
}

// ListenUnix creates the socket with mode 0600 (0660 with a group). A stale
// socket file left by a crashed agent is replaced; a live one (another
// agent answers on it) is an error.
func ListenUnix(s UnixSocket) (net.Listener, error) {
	dir := filepath.Dir(s.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("could not create the socket's directory: %w", err)
	}
	if st, err := os.Lstat(s.Path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; remove it or choose another path", s.Path)
		}
		if c, err := net.DialTimeout("unix", s.Path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("another agent is already serving on %s", s.Path)
		}
		os.Remove(s.Path)
	}
	// The socket is created with no permissions for others from the start:
	// there is no moment at which another user could connect.
	old := umask(0o177)
	l, err := net.Listen("unix", s.Path)
	umask(old)
	if err != nil {
		return nil, fmt.Errorf("could not listen on %s: %w", s.Path, err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	mode := os.FileMode(0o600)
	if s.HasGroup {
		if err := os.Chown(s.Path, -1, s.Group); err != nil {
			l.Close()
			os.Remove(s.Path)
			return nil, fmt.Errorf("could not give the socket to group %d: %w", s.Group, err)
		}
		mode = 0o660
	}
	if err := os.Chmod(s.Path, mode); err != nil {
		l.Close()
		os.Remove(s.Path)
		return nil, err
	}
	return l, nil
}

// TLSFiles names the certificate, key and (optional) client CA of a TLS
// listener.
type TLSFiles struct {
	Cert, Key, ClientCA string
}

// Config returns the TLS configuration, nil when no certificate is set.
func (t TLSFiles) Config() (*tls.Config, error) {
	if t.Cert == "" && t.Key == "" {
		if t.ClientCA != "" {
			return nil, errors.New("a client CA needs a server certificate and key (--tls-cert, --tls-key)")
		}
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("could not load the TLS certificate and key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCA != "" {
		pem, err := os.ReadFile(t.ClientCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", t.ClientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ListenTCP listens on addr. An address beyond loopback is refused unless
// tlsCfg is set.
func ListenTCP(addr string, tlsCfg *tls.Config) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("tcp address %q: %w", addr, err)
	}
	if tlsCfg == nil && !trusted.IsLoopback(host) {
		return nil, fmt.Errorf("%w: %s (use 127.0.0.1 or [::1], or give --tls-cert and --tls-key)", ErrInsecureListen, addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("could not listen on %s: %w", addr, err)
	}
	if tlsCfg != nil {
		l = tls.NewListener(l, tlsCfg)
	}
	return l, nil
}

// Serve serves the API on every listener until ctx is done, then stops
// accepting, lets requests in flight finish within grace, and removes the
// Unix sockets it created.
func (a *Agent) Serve(ctx context.Context, ls []Listener, grace time.Duration) error {
	var servers []*http.Server
	errs := make(chan error, len(ls))
	for _, l := range ls {
		srv := &http.Server{
			Handler:           a.Handler(l.Auth),
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       15 * time.Second,
			WriteTimeout:      a.o.RequestDeadline + 5*time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    16 << 10,
			ConnContext:       ConnContext,
			// net/http's own complaints (a failed TLS handshake, a broken
			// connection) go to the diagnostic log, not bare to stderr.
			ErrorLog: stdlog.New(a.o.Log.With().Str("component", "http").Logger().Level(zerolog.WarnLevel), "", 0),
		}
		servers = append(servers, srv)
		go func(l Listener) {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("serving on %s: %w", l.Addr(), err)
			}
		}(l)
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errs:
	}
	shut, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Add(1)
		go func(srv *http.Server) {
			defer wg.Done()
			if err := srv.Shutdown(shut); err != nil {
				a.o.Log.Warn().Err(err).Msg("requests still running at the end of the grace period were cut off")
				srv.Close()
			}
		}(srv)
	}
	wg.Wait()
	for _, l := range ls {
		if l.Path != "" {
			os.Remove(l.Path)
		}
	}
	return serveErr
}

// ParseListen splits a --listen value: unix:PATH or tcp:HOST:PORT.
func ParseListen(s string) (network, addr string, err error) {
	network, addr, ok := strings.Cut(s, ":")
	if !ok || addr == "" || (network != "unix" && network != "tcp") {
		return "", "", fmt.Errorf("--listen %q: want unix:PATH or tcp:HOST:PORT", s)
	}
	return network, addr, nil
}
