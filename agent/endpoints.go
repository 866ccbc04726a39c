package agent

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agent/access"
	"github.com/signagent/signagent/agent/listen"
	"github.com/signagent/signagent/safefile"
)

// listen opens the inherited and configured listeners. The bearer token
// file and the TLS files come first: a caller that waits for the Unix
// socket to appear and then reads the bearer token file finds it there.
func (d *Daemon) listen() error {
	if d.servesTCP() {
		if _, err := d.serverTLS(); err != nil {
			return err
		}
		if _, err := d.needBearer(); err != nil {
			return err
		}
	}
	for _, l := range d.cfg.Inherited {
		if l == nil {
			continue
		}
		if _, ok := l.(*net.UnixListener); ok {
			d.ls = append(d.ls, Listener{Listener: l, Auth: d.peer})
			continue
		}
		tl, err := d.inheritedTCP(l)
		if err != nil {
			return err
		}
		d.ls = append(d.ls, tl)
	}
	for _, spec := range d.cfg.Listen {
		l, err := d.listenOn(spec)
		if err != nil {
			return err
		}
		d.ls = append(d.ls, l)
	}
	return nil
}

// servesTCP says whether any listener, inherited or configured, is TCP.
func (d *Daemon) servesTCP() bool {
	for _, l := range d.cfg.Inherited {
		if _, unix := l.(*net.UnixListener); l != nil && !unix {
			return true
		}
	}
	for _, spec := range d.cfg.Listen {
		if network, _, err := listen.ParseListen(spec); err == nil && network != "unix" {
			return true
		}
	}
	return false
}

// inheritedTCP serves a TCP socket systemd passed under the rules of
// --listen tcp: (TLS, loopback, bearer token).
func (d *Daemon) inheritedTCP(l net.Listener) (Listener, error) {
	return d.tcpListener(func(tlsCfg *tls.Config) (net.Listener, error) { return listen.InheritedTCP(l, tlsCfg) })
}

func (d *Daemon) listenOn(spec string) (Listener, error) {
	network, addr, err := listen.ParseListen(spec)
	if err != nil {
		return Listener{}, badConfig(err)
	}
	if network == "unix" {
		us := listen.UnixSocket{Path: addr}
		if g := d.cfg.SocketGroup; g != "" {
			if us.Group, err = lookupGroup(g); err != nil {
				return Listener{}, err
			}
			us.HasGroup = true
		}
		l, err := listen.ListenUnix(us)
		if err != nil {
			return Listener{}, err
		}
		return Listener{Listener: l, Auth: d.peer, Path: addr}, nil
	}
	return d.tcpListener(func(tlsCfg *tls.Config) (net.Listener, error) { return listen.ListenTCP(addr, tlsCfg) })
}

// tcpListener is the one place a TCP listener gets its rules, whether
// opened here or passed in by systemd: TLS when a certificate is given,
// refused beyond loopback without it, and the bearer token.
func (d *Daemon) tcpListener(open func(*tls.Config) (net.Listener, error)) (Listener, error) {
	tlsCfg, err := d.serverTLS()
	if err != nil {
		return Listener{}, err
	}
	b, err := d.needBearer()
	if err != nil {
		return Listener{}, err
	}
	l, err := open(tlsCfg)
	if errors.Is(err, listen.ErrInsecureListen) {
		return Listener{}, badConfig(err)
	}
	if err != nil {
		return Listener{}, err
	}
	return Listener{Listener: l, Auth: b}, nil
}

// serverTLS loads the TLS files once and returns a configuration that
// reads the current one at each handshake, so that Reload can replace the
// certificate; nil without TLS files.
func (d *Daemon) serverTLS() (*tls.Config, error) {
	if d.tls.Load() == nil {
		c, err := d.cfg.TLS.Config()
		if err != nil {
			return nil, badConfig(err)
		}
		if c == nil {
			return nil, nil
		}
		d.tls.Store(c)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return d.tls.Load(), nil
	}}, nil
}

func (d *Daemon) needBearer() (*access.BearerAuth, error) {
	if d.bearer == nil {
		tok, err := bearerToken(d.cfg.BearerTokenFile, d.log)
		if err != nil {
			return nil, err
		}
		d.bearer = access.NewBearerAuth(tok)
	}
	return d.bearer, nil
}

// bearerToken reads the bearer token file (ReadBearerToken), creating it
// with a random token (mode 0600) when it does not exist.
func bearerToken(path string, log zerolog.Logger) (string, error) {
	tok, err := ReadBearerToken(path)
	if errors.Is(err, os.ErrNotExist) {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return "", err
		}
		tok := hex.EncodeToString(raw)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", err
		}
		if err := safefile.Write(path, []byte(tok+"\n"), 0o600); err != nil {
			return "", err
		}
		log.Info().Str("file", path).Msg("created a bearer token for TCP callers")
		return tok, nil
	}
	return tok, err
}

// ReadBearerToken reads the bearer token file as the agent does when it
// starts (checked like every secret file: regular, not readable by every
// user; a token of at least 16 characters), without creating it: an
// error wrapping os.ErrNotExist when it is not there. signagent doctor
// checks the file with it.
func ReadBearerToken(path string) (string, error) {
	b, err := safefile.ReadSecret(path, 4096, 0)
	if errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err != nil {
		return "", badConfig(fmt.Errorf("the bearer token file: %w", err))
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", badConfig(fmt.Errorf("the bearer token in %s is shorter than 16 characters", path))
	}
	return tok, nil
}

func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return 0, badConfig(fmt.Errorf("--socket-group %q: %w", g, err))
	}
	return strconv.Atoi(gr.Gid)
}
