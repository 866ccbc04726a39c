package store

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// IsURL says whether s names a shared store (as opposed to "local").
func IsURL(s string) bool {
	return strings.HasPrefix(s, "redis://") || strings.HasPrefix(s, "rediss://") || strings.HasPrefix(s, "redis+sentinel://")
}

// ParseURL reads a store URL into go-redis options. A password in the URL
// is refused: URLs end up in process listings, logs and shell history.
func ParseURL(raw string) (*redis.UniversalOptions, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w: %q: want redis://[user@]host:port[/db], rediss://... or redis+sentinel://host:port[,host:port...]/mastername[/db]", ErrBadURL, redactURL(raw))
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
	switch u.Scheme {
	case "redis", "rediss":
		if len(o.Addrs) != 1 {
			return nil, fmt.Errorf("%w: %s: one host:port (several are for redis+sentinel://)", ErrBadURL, u.Redacted())
		}
		if len(parts) > 1 {
			return nil, fmt.Errorf("%w: %s: the path is the database number alone", ErrBadURL, u.Redacted())
		}
		if len(parts) == 1 {
			if err := db(parts[0]); err != nil {
				return nil, err
			}
		}
		if u.Scheme == "rediss" {
			o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
		}
	case "redis+sentinel":
		if len(parts) == 0 || len(parts) > 2 {
			return nil, fmt.Errorf("%w: %s: the path is /mastername[/db]", ErrBadURL, u.Redacted())
		}
		o.MasterName = parts[0]
		if len(parts) == 2 {
			if err := db(parts[1]); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("%w: scheme %q: want redis, rediss or redis+sentinel", ErrBadURL, u.Scheme)
	}
	return o, nil
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
