package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// backend is where a Shared store keeps its values: sealed bytes under
// key names the store has already chosen. Sealing, generations, names,
// leases' renewal and the metrics are the store's (Shared), the same over
// every backend; a backend only keeps bytes, fences writes by the lease
// and answers in time. Every method is called with a context the store
// has bounded by its timeout, and says a failure to answer with an error
// wrapping ErrUnavailable.
//
// A record's value and its lease are two keys, data and data+":lease",
// whose names share a hash tag ({...}): a backend that spreads keys over
// nodes (Redis Cluster) keeps an identity's two in one place, so that a
// fenced write is one atomic step there.
type backend interface {
	// get returns the value kept at data when it is at most max bytes
	// long, checked where it is kept so that a longer one is never sent:
	// ErrNotFound when there is none, ErrTooLarge (not read) when it is
	// longer, ErrSealed when data holds something that is no record.
	get(ctx context.Context, data string, max int) ([]byte, error)
	// put keeps value at data for ttl (0: until replaced) when owner holds
	// lease and data still holds read (nil: not compared; empty: no
	// record), and del removes it: ErrFenced when owner does not hold it,
	// errChanged when data no longer holds read (rewritten without the
	// lease: convert.go); errUnreplicated when the write is done but not
	// yet on as many replicas as asked (kept, and counted).
	put(ctx context.Context, data, lease, owner string, read, value []byte, ttl time.Duration) error
	del(ctx context.Context, data, lease, owner string) error
	// take makes owner the lease's holder for ttl when no one holds it,
	// and says whether it did; renew extends owner's hold by ttl, and
	// release ends it (neither touches another holder's).
	take(ctx context.Context, lease, owner string, ttl time.Duration) (bool, error)
	renew(ctx context.Context, lease, owner string, ttl time.Duration) error
	release(ctx context.Context, lease, owner string) error
	// announce adds member (unless "") to the announcements at key,
	// living ttl, drops those past their lifetime, and lists the live
	// ones; withdraw removes member. Every agent's clock is the backend's
	// (its TIME), so that agents' clocks need not agree.
	announce(ctx context.Context, key, member string, ttl time.Duration) ([]string, error)
	withdraw(ctx context.Context, key, member string) error
	// request adds data to the set at key (living ttl), and requests takes
	// up to n of its members out.
	request(ctx context.Context, key, data string, ttl time.Duration) error
	requests(ctx context.Context, key string, n int) ([]string, error)
	// swap replaces the value at data with value, for ttl (0: none), only
	// while data still holds old (ErrFenced otherwise): a record rewritten
	// in another format, the same record, needs no lease.
	swap(ctx context.Context, data string, old, value []byte, ttl time.Duration) error
	// scan calls f with every key name matching match, on every node, one
	// call at a time, until f returns false.
	scan(ctx context.Context, match string, f func(key string) bool) error
	// ping says whether the backend answers: all of it, where it is
	// several nodes.
	ping(ctx context.Context) error
	close() error
}

// errUnreplicated is a write kept on the primary that the replicas asked
// for did not confirm in time.
var errUnreplicated = errors.New("the write is not confirmed by the replicas")

// errChanged is a fenced write refused because the record is no longer
// the one its writer read (a holder's read, then a rewrite in another
// format, which takes no lease): the writer reads again.
var errChanged = fmt.Errorf("%w: the record changed since it was read", ErrFenced)

// backends are the stores Open knows, by URL scheme: each parses its URL
// (a password in it is refused) and connects lazily; timeout bounds
// each call.
var backends = map[string]func(raw string, o Options, timeout time.Duration) (backend, error){
	"redis":           openRedis,
	"rediss":          openRedis,
	"redis+sentinel":  openRedis,
	"rediss+sentinel": openRedis,
	"redis+cluster":   openCluster,
	"rediss+cluster":  openCluster,
}

// schemesHelp is what a store URL may be, for error messages.
const schemesHelp = "redis://[user@]host:port[/db], rediss://..., redis+sentinel://host:port[,host:port...]/mastername[/db], " +
	"rediss+sentinel://..., redis+cluster://host:port[,host:port...] or rediss+cluster://..."

// Open opens the shared store rawURL names, its backend chosen by the
// URL's scheme (redis://, rediss://, redis+sentinel://, redis+cluster://;
// rediss+ for TLS to every node, Sentinel's too).
// It connects lazily: a store that is down at start is reported by Ping
// and by each call, and used again as soon as it answers. The URL is
// read once, by its backend, and before the key: a mistyped URL is the
// error reported.
func Open(rawURL string, o Options) (*Shared, error) {
	scheme, _, found := strings.Cut(rawURL, "://")
	open, known := backends[scheme]
	if !found || !known {
		if found {
			return nil, fmt.Errorf("%w: scheme %q: want %s", ErrBadURL, scheme, schemesHelp)
		}
		return nil, fmt.Errorf("%w: %q: want %s", ErrBadURL, redactURL(rawURL), schemesHelp)
	}
	s := newShared(o)
	b, err := open(rawURL, o, s.timeout)
	if err != nil {
		return nil, err
	}
	if o.Sealer == nil {
		b.close()
		return nil, fmt.Errorf("%w: a shared store needs --store-key-file (make one with signagent store-key --out FILE)", ErrBadKey)
	}
	s.b = b
	return s, nil
}
