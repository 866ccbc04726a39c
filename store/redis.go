package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisBackend keeps values in Redis: one server (redis://, rediss://),
// the master a Sentinel set names (redis+sentinel://), or the masters of
// a Redis Cluster (redis+cluster://, cluster.go). Every key a command or
// script touches is one identity's, and they share a hash tag: one slot.
type redisBackend struct {
	rdb redis.UniversalClient
	// primary is the client of the node that holds key (the one server,
	// Sentinel's master, the cluster's master for key's slot), asked
	// after a write whether its replicas have it.
	primary func(ctx context.Context, key string) (*redis.Client, error)
	// pingAll pings every node that holds records.
	pingAll func(ctx context.Context) error
	// nodes are the clients of every node that holds records.
	nodes func(ctx context.Context, f func(context.Context, *redis.Client) error) error
	// replicas is how many replicas a write waits for (-1: none), wait
	// how long at most.
	replicas int
	wait     time.Duration
}

// quiet drops go-redis's own log lines ("connection pool: failed to
// dial"): the store's errors reach the caller, who says them once.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quiet{}) }

// openRedis is the backend of redis://, rediss:// and redis+sentinel://.
func openRedis(raw string, o Options, timeout time.Duration) (backend, error) {
	uo, err := redisOptions(raw, o, timeout)
	if err != nil {
		return nil, err
	}
	var c *redis.Client
	if uo.MasterName != "" {
		c = redis.NewFailoverClient(uo.Failover())
	} else {
		c = redis.NewClient(uo.Simple())
	}
	b := newRedisBackend(c, o, timeout)
	b.primary = func(context.Context, string) (*redis.Client, error) { return c, nil }
	b.pingAll = func(ctx context.Context) error { return c.Ping(ctx).Err() }
	b.nodes = func(ctx context.Context, f func(context.Context, *redis.Client) error) error { return f(ctx, c) }
	return b, nil
}

func newRedisBackend(rdb redis.UniversalClient, o Options, timeout time.Duration) *redisBackend {
	b := &redisBackend{rdb: rdb, replicas: o.WaitReplicas, wait: timeout / 2}
	if b.replicas == 0 {
		b.replicas = 1
	}
	return b
}

func (b *redisBackend) close() error { return b.rdb.Close() }

func (b *redisBackend) ping(ctx context.Context) error { return b.unavailable(b.pingAll(ctx)) }

// unavailable names a failure to answer ErrUnavailable, without what the
// server sent back verbatim.
func (b *redisBackend) unavailable(err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	var re redis.Error
	if errors.As(err, &re) && !strings.HasPrefix(re.Error(), "LOADING") && !strings.HasPrefix(re.Error(), "READONLY") &&
		!strings.HasPrefix(re.Error(), "MASTERDOWN") && !strings.HasPrefix(re.Error(), "TRYAGAIN") {
		// The server answered, and refused (a wrong password: NOAUTH,
		// WRONGPASS; a cluster without a master for a slot: CLUSTERDOWN).
		return fmt.Errorf("%w: Redis refused: %s", ErrUnavailable, firstWord(re.Error()))
	}
	return fmt.Errorf("%w: %s", ErrUnavailable, cleanErr(err))
}

func firstWord(s string) string {
	w, _, _ := strings.Cut(s, " ")
	return w
}

// cleanErr says what failed without what the server sent back verbatim.
func cleanErr(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "no answer in time"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Op + ": " + oe.Err.Error()
	}
	return "not a Redis answer"
}

// getScript returns a record's sealed value when it is at most ARGV[1]
// bytes long, and otherwise its length (HSTRLEN), so that a value someone
// made huge never leaves Redis; -1 when there is none, -2 when the key is
// not a record (a hash).
var getScript = redis.NewScript(`
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then return -1 end
if t ~= 'hash' then return -2 end
local n = redis.call('HSTRLEN', KEYS[1], 'v')
if n > tonumber(ARGV[1]) then return n end
local v = redis.call('HGET', KEYS[1], 'v')
if not v then return -1 end
return v`)

func (b *redisBackend) get(ctx context.Context, data string, max int) ([]byte, error) {
	res, err := getScript.Run(ctx, b.rdb, []string{data}, max).Result()
	if err != nil {
		return nil, b.unavailable(err)
	}
	switch v := res.(type) {
	case string:
		return []byte(v), nil
	case int64:
		switch {
		case v == -1:
			return nil, ErrNotFound
		case v == -2:
			return nil, fmt.Errorf("%w: the key holds no record (it is not a Redis hash)", ErrSealed)
		case v > int64(max):
			return nil, fmt.Errorf("%w: %d bytes, more than %d; it was not read", ErrTooLarge, v, max)
		}
	}
	return nil, fmt.Errorf("%w: not the answer of the store's read script", ErrUnavailable)
}

// putScript writes a value only for the lease's holder (the fence): an
// agent whose lease expired while it was paused cannot overwrite what the
// next holder wrote. KEYS: the record, its lease (one hash tag: one slot).
// ARGV: owner, value ("" deletes), ttl in ms (0: none), whether to compare
// ("1": the record must still hold ARGV[5], "" for none; a key that is no
// record counts as none), the value read. A key that is not a record is
// replaced. 0: not the holder; 2: the record changed since it was read (a
// record rewritten in another format, convert.go, which takes no lease).
var putScript = redis.NewScript(`
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local t = redis.call('TYPE', KEYS[1])['ok']
if ARGV[4] == '1' then
  local cur = ''
  if t == 'hash' then cur = redis.call('HGET', KEYS[1], 'v') or '' end
  if cur ~= ARGV[5] then return 2 end
end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) return 1 end
if t ~= 'hash' then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 'v', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'ver', 1)
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) else redis.call('PERSIST', KEYS[1]) end
return 1`)

// put writes value at data for owner, when the record still holds read
// (nil: no comparison; empty: none, or no record).
func (b *redisBackend) put(ctx context.Context, data, lease, owner string, read, value []byte, ttl time.Duration) error {
	return b.write(ctx, data, lease, owner, read, value, ttl)
}

func (b *redisBackend) del(ctx context.Context, data, lease, owner string) error {
	return b.write(ctx, data, lease, owner, nil, nil, 0)
}

// write runs putScript: value at data (none deletes it) for ttl, when
// owner holds lease and (read not nil) the record still holds read; then
// waits for the replicas.
func (b *redisBackend) write(ctx context.Context, data, lease, owner string, read, value []byte, ttl time.Duration) error {
	compare := ""
	if read != nil {
		compare = "1"
	}
	put, err := putScript.Run(ctx, b.rdb, []string{data, lease}, owner, value, ttl.Milliseconds(), compare, read).Int64()
	if err != nil {
		return b.unavailable(err)
	}
	switch put {
	case 1:
	case 2:
		return errChanged
	default:
		return ErrFenced
	}
	return b.replicate(ctx, data)
}

// replicate waits (WAIT, within half the store's timeout) until as many
// replicas as asked, or as data's primary has, hold the last write:
// errUnreplicated when they do not, or when that is not known.
func (b *redisBackend) replicate(ctx context.Context, data string) error {
	if b.replicas < 0 {
		return nil
	}
	c, err := b.primary(ctx, data)
	if err != nil {
		return errUnreplicated
	}
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return errUnreplicated // not known to be replicated
	}
	if len(role) < 3 || role[0] != "master" {
		return nil
	}
	have, _ := role[2].([]any)
	want := min(b.replicas, len(have))
	if want == 0 {
		return nil
	}
	acked, err := c.Do(ctx, "WAIT", want, b.wait.Milliseconds()).Int64()
	if err != nil || acked < int64(want) {
		return errUnreplicated
	}
	return nil
}

var (
	renewScript   = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`)
	releaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

func (b *redisBackend) take(ctx context.Context, lease, owner string, ttl time.Duration) (bool, error) {
	got, err := b.rdb.SetNX(ctx, lease, owner, ttl).Result()
	return got, b.unavailable(err)
}

func (b *redisBackend) renew(ctx context.Context, lease, owner string, ttl time.Duration) error {
	return b.unavailable(renewScript.Run(ctx, b.rdb, []string{lease}, owner, ttl.Milliseconds()).Err())
}

func (b *redisBackend) release(ctx context.Context, lease, owner string) error {
	return b.unavailable(releaseScript.Run(ctx, b.rdb, []string{lease}, owner).Err())
}

// announceScript: KEYS[1] the announcements (a sorted set, each member's
// score the Unix ms it expires at, by the server's clock); ARGV: the
// member ("": list only), its lifetime in ms. It drops the expired, adds
// the member and lists the live ones.
var announceScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[1] ~= '' then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
end
return redis.call('ZRANGE', KEYS[1], 0, -1)`)

func (b *redisBackend) announce(ctx context.Context, key, member string, ttl time.Duration) ([]string, error) {
	v, err := announceScript.Run(ctx, b.rdb, []string{key}, member, ttl.Milliseconds()).StringSlice()
	return v, b.unavailable(err)
}

func (b *redisBackend) withdraw(ctx context.Context, key, member string) error {
	return b.unavailable(b.rdb.ZRem(ctx, key, member).Err())
}

func (b *redisBackend) request(ctx context.Context, key, data string, ttl time.Duration) error {
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, key, data)
		p.PExpire(ctx, key, ttl)
		return nil
	})
	return b.unavailable(err)
}

func (b *redisBackend) requests(ctx context.Context, key string, n int) ([]string, error) {
	v, err := b.rdb.SPopN(ctx, key, int64(n)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, b.unavailable(err)
}

// scan runs SCAN on every node that holds records (a cluster's masters at
// once: f is called by one at a time), until f says stop.
func (b *redisBackend) scan(ctx context.Context, match string, f func(string) bool) error {
	var mu sync.Mutex
	stopped := false
	return b.unavailable(b.nodes(ctx, func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, match, 256).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			if !stopped {
				stopped = !f(it.Val())
			}
			stop := stopped
			mu.Unlock()
			if stop {
				return nil
			}
		}
		return it.Err()
	}))
}

// swapScript: KEYS[1] the record; ARGV: the value it must hold, the new
// one, the ttl in ms (0: none).
var swapScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' or redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'ver', 1)
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) else redis.call('PERSIST', KEYS[1]) end
return 1`)

func (b *redisBackend) swap(ctx context.Context, data string, old, value []byte, ttl time.Duration) error {
	n, err := swapScript.Run(ctx, b.rdb, []string{data}, old, value, ttl.Milliseconds()).Int64()
	if err != nil {
		return b.unavailable(err)
	}
	if n != 1 {
		return ErrFenced
	}
	return b.replicate(ctx, data)
}
