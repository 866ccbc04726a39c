package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/safefile"
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
// socket file left by a crashed agent of the same user is replaced: one
// that refuses connections (ECONNREFUSED: nobody listens on it) and that
// this user owns. Anything else (another agent answers, the socket is
// another user's, the connect failed for another reason such as EACCES or
// a full backlog) is an error, and the file is left alone.
func ListenUnix(s UnixSocket) (net.Listener, error) {
	dir := filepath.Dir(s.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("could not create the socket's directory: %w", err)
	}
	if st, err := os.Lstat(s.Path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; remove it or choose another path", s.Path)
		}
		if err := staleSocket(s.Path, st); err != nil {
			return nil, err
		}
		os.Remove(s.Path)
	}
	// The socket is created with no permissions for others from the start:
	// there is no moment at which another user could connect. It is made
	// under a temporary name and linked to its path once it listens with
	// its final owner and mode, so that a caller who sees the path never
	// meets a socket that is bound but not yet listening (ECONNREFUSED)
	// or not yet its group's; the link fails rather than replace a socket
	// another process put there meanwhile.
	tmp := filepath.Join(dir, fmt.Sprintf(".sa%d", os.Getpid())) // no longer than most socket names: the path limit
	os.Remove(tmp)
	old := umask(0o177)
	l, err := net.Listen("unix", tmp)
	umask(old)
	if err != nil {
		return nil, fmt.Errorf("could not listen on %s: %w", s.Path, err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	defer os.Remove(tmp)
	mode := os.FileMode(0o600)
	if s.HasGroup {
		if err := os.Chown(tmp, -1, s.Group); err != nil {
			l.Close()
			return nil, fmt.Errorf("could not give the socket to group %d: %w", s.Group, err)
		}
		mode = 0o660
	}
	if err := os.Chmod(tmp, mode); err != nil {
		l.Close()
		return nil, err
	}
	if err := os.Link(tmp, s.Path); err != nil {
		l.Close()
		return nil, fmt.Errorf("could not put the socket at %s: %w", s.Path, err)
	}
	ul := &unixListener{Listener: limit(l, DefaultMaxConnsUnix), path: s.Path}
	if st, err := os.Lstat(s.Path); err == nil {
		ul.id = fileID(st)
	}
	return ul, nil
}

// unixListener is a socket this process created; it remembers which file
// that was, so that it removes its own socket and never one that another
// process put at the same path since.
type unixListener struct {
	net.Listener
	path string
	id   [2]uint64 // device and inode
}

// Addr is the socket's path (it was bound under a temporary name).
func (u *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: u.path, Net: "unix"} }

// removeSocket removes the socket file if it is still the one created here.
func (u *unixListener) removeSocket() {
	if st, err := os.Lstat(u.path); err == nil && fileID(st) == u.id {
		os.Remove(u.path)
	}
}

func fileID(st os.FileInfo) [2]uint64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return [2]uint64{uint64(sys.Dev), sys.Ino}
	}
	return [2]uint64{}
}

// staleSocket returns nil when the socket at path is a dead one of ours.
func staleSocket(path string, st os.FileInfo) error {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("another agent is already serving on %s", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s is a socket that may be in use (connecting to it failed: %v); not replacing it: stop the agent that owns it or choose another path", path, errors.Unwrap(errors.Unwrap(err)))
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("%s is a dead socket of another user; not replacing it: remove it or choose another path", path)
	}
	return nil
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
	if err := pkcs11.CheckSecretFile(t.Key); err != nil {
		return nil, fmt.Errorf("the TLS key: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("could not load the TLS certificate and key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCA != "" {
		pem, err := safefile.Read(t.ClientCA, 1<<20)
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
	if err := checkTCP(host, addr, tlsCfg); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("could not listen on %s: %w", addr, err)
	}
	return secureTCP(l, tlsCfg), nil
}

// InheritedTCP applies ListenTCP's rules to a TCP socket handed over by
// systemd: refused beyond loopback (a wildcard address included) without
// TLS, wrapped in TLS when tlsCfg is set, capped in its connections.
func InheritedTCP(l net.Listener, tlsCfg *tls.Config) (net.Listener, error) {
	addr := l.Addr().String()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("the socket systemd passed (%s): %w", addr, err)
	}
	if err := checkTCP(host, "the socket systemd passed, "+addr+",", tlsCfg); err != nil {
		return nil, err
	}
	return secureTCP(l, tlsCfg), nil
}

// checkTCP refuses plain HTTP beyond loopback.
func checkTCP(host, what string, tlsCfg *tls.Config) error {
	if tlsCfg == nil && !trusted.IsLoopback(host) {
		return fmt.Errorf("%w: %s (use 127.0.0.1 or [::1], or give --tls-cert and --tls-key)", ErrInsecureListen, what)
	}
	return nil
}

// secureTCP caps l's connections and wraps it in TLS when tlsCfg is set.
// The cap goes below TLS: net/http sees a TLS connection only as a
// *tls.Conn.
func secureTCP(l net.Listener, tlsCfg *tls.Config) net.Listener {
	l = limit(l, DefaultMaxConnsTCP)
	if tlsCfg != nil {
		l = tls.NewListener(l, tlsCfg)
	}
	return cappedListener{l}
}

// capped marks listeners that already cap their connections.
type capped interface{ capped() }

type cappedListener struct{ net.Listener }

func (cappedListener) capped() {}
func (*unixListener) capped()  {}

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
// connections.
func (a *Agent) startServers(ls []Listener) *serverSet {
	set := &serverSet{errs: make(chan error, len(ls))}
	for _, l := range ls {
		if _, ok := l.Listener.(capped); !ok { // handed over by systemd
			max := DefaultMaxConnsUnix
			if _, ok := l.Listener.Addr().(*net.TCPAddr); ok {
				max = DefaultMaxConnsTCP
			}
			l.Listener = limit(l.Listener, max)
		}
		srv := NewHTTPServer(a.handler(l.Auth), a.cfg.RequestDeadline)
		srv.ConnContext = ConnContext
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

// ParseListen splits a --listen value: unix:PATH or tcp:HOST:PORT.
func ParseListen(s string) (network, addr string, err error) {
	network, addr, ok := strings.Cut(s, ":")
	if !ok || addr == "" || (network != "unix" && network != "tcp") {
		return "", "", fmt.Errorf("--listen %q: want unix:PATH or tcp:HOST:PORT", s)
	}
	return network, addr, nil
}
