package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/signagent/signagent/safefile"
)

// redisOptions reads a Redis store URL into go-redis options, with the
// password, CA bundle and timeouts of o. A password in the URL is
// refused: URLs end up in process listings, logs and shell history.
func redisOptions(raw string, o Options, timeout time.Duration) (*redis.UniversalOptions, error) {
	uo, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	uo.Password = o.Password
	if o.CAFile != "" {
		if uo.TLSConfig == nil {
			return nil, fmt.Errorf("%w: --store-ca-file is for rediss://, rediss+sentinel:// and rediss+cluster:// (TLS)", ErrBadURL)
		}
		pem, err := safefile.Read(o.CAFile, 1<<20)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrBadURL, o.CAFile)
		}
		uo.TLSConfig.RootCAs = pool
	}
	uo.DialTimeout, uo.ReadTimeout, uo.WriteTimeout = timeout, timeout, timeout
	if o.Password != "" && uo.TLSConfig == nil && !o.Insecure {
		for _, a := range uo.Addrs {
			if !loopback(a) {
				return nil, fmt.Errorf("%w: %s", ErrBadURL, clearPassword(a))
			}
		}
		// Sentinel's master and a cluster's nodes are learnt from the
		// store: each is checked as it is dialed.
		d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
		uo.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if !loopback(addr) {
				return nil, errors.New(clearPassword(addr))
			}
			return d.DialContext(ctx, network, addr)
		}
	}
	uo.MaxRetries = 1
	uo.ContextTimeoutEnabled = true
	return uo, nil
}

func parseURL(raw string) (*redis.UniversalOptions, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w: %q: want %s", ErrBadURL, redactURL(raw), schemesHelp)
	}
	if _, has := u.User.Password(); has {
		return nil, fmt.Errorf("%w: it holds a password; give the password with --store-password-file or SIGNAGENT_STORE_PASSWORD, never in the URL", ErrBadURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: %s: no query or fragment is read", ErrBadURL, u.Redacted())
	}
	o := &redis.UniversalOptions{Addrs: strings.Split(u.Host, ",")}
	if u.User != nil {
		o.Username = u.User.Username()
	}
	for _, a := range o.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("%w: %s: %q is not host:port", ErrBadURL, u.Redacted(), a)
		}
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if parts[0] == "" {
		parts = nil
	}
	db := func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: %s: database %q is not a number", ErrBadURL, u.Redacted(), s)
		}
		o.DB = n
		return nil
	}
	tlsOn := strings.HasPrefix(u.Scheme, "rediss")
	switch u.Scheme {
	case "redis", "rediss":
		if len(o.Addrs) != 1 {
			return nil, fmt.Errorf("%w: %s: one host:port (several are for redis+sentinel:// and redis+cluster://)", ErrBadURL, u.Redacted())
		}
		if len(parts) > 1 {
			return nil, fmt.Errorf("%w: %s: the path is the database number alone", ErrBadURL, u.Redacted())
		}
		if len(parts) == 1 {
			if err := db(parts[0]); err != nil {
				return nil, err
			}
		}
	case "redis+sentinel", "rediss+sentinel":
		if len(parts) == 0 || len(parts) > 2 {
			return nil, fmt.Errorf("%w: %s: the path is /mastername[/db]", ErrBadURL, u.Redacted())
		}
		o.MasterName = parts[0]
		if len(parts) == 2 {
			if err := db(parts[1]); err != nil {
				return nil, err
			}
		}
	case "redis+cluster", "rediss+cluster":
		// A cluster has database 0 alone; the addresses are where to
		// learn the cluster's map from (any of its nodes will do).
		if len(parts) > 0 {
			return nil, fmt.Errorf("%w: %s: a cluster URL has no path (a Redis Cluster has database 0 alone)", ErrBadURL, u.Redacted())
		}
	default:
		return nil, fmt.Errorf("%w: scheme %q: want %s", ErrBadURL, u.Scheme, schemesHelp)
	}
	if tlsOn {
		// Every node, Sentinel's and the cluster's included, is checked
		// against the name or address it is dialed by (tls.Dial takes the
		// server name from the address when the config has none).
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if len(o.Addrs) == 1 && o.MasterName == "" && u.Scheme == "rediss" {
			o.TLSConfig.ServerName = u.Hostname()
		}
	}
	return o, nil
}

// loopback reports whether host:port is this machine's loopback (localhost,
// 127.0.0.0/8, ::1).
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// clearPassword says why the store password is not sent to addr.
func clearPassword(addr string) string {
	return "the store password would cross the network in clear to " + addr +
		": use rediss://, rediss+sentinel:// or rediss+cluster:// (TLS), or give --store-insecure (SIGNAGENT_STORE_INSECURE) to allow it"
}

// redactURL drops what could be a password from a URL that did not parse.
func redactURL(raw string) string {
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		if j := strings.Index(raw, "://"); j >= 0 && j < i {
			return raw[:j+3] + "…@" + raw[i+1:]
		}
		return "…@" + raw[i+1:]
	}
	return raw
}
