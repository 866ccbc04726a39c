package listen

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/signagent/signagent/safefile"
	"github.com/signagent/signagent/trusted"
)

// ErrInsecureListen is returned for a TCP address beyond loopback without TLS.
var ErrInsecureListen = errors.New("refusing to listen beyond loopback without TLS")

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
	if err := safefile.CheckSecret(t.Key, 0); err != nil {
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
	l = Limit(l, DefaultMaxConnsTCP)
	if tlsCfg != nil {
		l = tls.NewListener(l, tlsCfg)
	}
	return cappedListener{l}
}

// Capped says whether l already caps its connections (a listener made
// here does; one systemd handed over does not, until Limit).
func Capped(l net.Listener) bool {
	_, ok := l.(capped)
	return ok
}

// capped marks listeners that already cap their connections.
type capped interface{ capped() }

type cappedListener struct{ net.Listener }

func (cappedListener) capped() {}
func (*unixListener) capped()  {}

// ParseListen splits a --listen value: unix:PATH or tcp:HOST:PORT.
func ParseListen(s string) (network, addr string, err error) {
	network, addr, ok := strings.Cut(s, ":")
	if !ok || addr == "" || (network != "unix" && network != "tcp") {
		return "", "", fmt.Errorf("--listen %q: want unix:PATH or tcp:HOST:PORT", s)
	}
	return network, addr, nil
}
