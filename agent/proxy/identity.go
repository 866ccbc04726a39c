package proxy

import (
	"fmt"
	"regexp"
	"sync"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/errdefs"
)

// The proxy's reading of Signagent-Identity, and the business method's
// metrics label: both cached, since a partner system sends the same few
// call after call.

// ParseIdentity reads IdentityHeader's value (authz.ParseSelector's
// syntax) and checks its credential, if any. The error names what is wrong
// without repeating the values.
func ParseIdentity(s string, legacySNILS bool) (authz.Selector, error) {
	sel, err := authz.ParseSelector(s)
	if err != nil {
		return authz.Selector{}, fmt.Errorf("%w: %s: %w", errdefs.ErrInvalidInput, IdentityHeader, err)
	}
	if c := sel.Credential; c != nil {
		if _, err := canonical.ParseOne(c.Phone, c.SNILS, c.Thumbprint, canonical.Options{AllowLegacySNILS: legacySNILS}); err != nil {
			return authz.Selector{}, fmt.Errorf("%s: %w", IdentityHeader, err)
		}
	}
	return sel, nil
}

// identityCache keeps the parsed identity of the header values seen last:
// a partner system sends the same few identities call after call, and
// parsing and checking one costs more than the rest of the agent's work
// on a proxied call. Only identities that parse are kept; the cache
// starts over when full, so that callers cannot grow it.
type identityCache struct {
	mu sync.RWMutex
	m  map[string]authz.Selector
}

const maxCachedIdentities = 256

func (c *identityCache) parse(s string, legacySNILS bool) (authz.Selector, error) {
	key := s
	if legacySNILS {
		key = "\x00" + s
	}
	c.mu.RLock()
	sel, ok := c.m[key]
	c.mu.RUnlock()
	if ok {
		return sel, nil
	}
	sel, err := ParseIdentity(s, legacySNILS)
	if err != nil {
		return sel, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedIdentities {
		c.m = make(map[string]authz.Selector, maxCachedIdentities)
	}
	c.m[key] = sel
	c.mu.Unlock()
	return sel, nil
}

// The metrics name a business method only when it is a plain name and the
// agent has not labelled too many already: callers cannot grow /metrics.
var methodName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,63}(/[A-Za-z][A-Za-z0-9_]{0,63})?$`)

const maxMethodLabels = 64

type methodLabels struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (l *methodLabels) label(method string) string {
	l.mu.Lock()
	seen := l.seen[method]
	l.mu.Unlock()
	if seen {
		return method // checked when first seen
	}
	if !methodName.MatchString(method) {
		return "other"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	if !l.seen[method] {
		if len(l.seen) >= maxMethodLabels {
			return "other"
		}
		l.seen[method] = true
	}
	return method
}
