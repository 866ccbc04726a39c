package store

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/signagent/signagent/safefile"
)

// Defaults of a shared store.
const (
	DefaultPrefix   = "signagent:"
	DefaultTimeout  = 2 * time.Second
	DefaultLeaseTTL = 8 * time.Second
	// DefaultMaxValue bounds a stored value, sealed (records are a few
	// KiB): a longer one is refused in Redis, before it is sent.
	DefaultMaxValue = 64 << 10
)

// Options configure a shared store.
type Options struct {
	// URL is redis://[user@]host:port[/db], rediss://... (TLS) or
	// redis+sentinel://host:port[,host:port...]/mastername[/db].
	URL string
	// Password is the Redis password (from a file or the environment,
	// never the URL).
	Password string
	// CAFile is the CA bundle for rediss:// (default: the system's).
	CAFile string
	// Prefix starts every key name (default "signagent:").
	Prefix string
	Sealer *Sealer
	// Timeout bounds every store call (default 2s): a slow store delays a
	// request, never hangs it.
	Timeout time.Duration
	// LeaseTTL is how long a lease lives without renewal (default 8s): an
	// agent killed while holding one delays the others at most this long.
	LeaseTTL time.Duration
	// WaitReplicas is how many replicas must have a write (WAIT) before
	// it counts as done, when the master has that many (default 1; -1:
	// none): a failover then cannot bring back a refresh token already
	// spent at the provider.
	WaitReplicas int
	// MaxValue bounds a stored value's length, sealed (Overhead more than
	// the record), in bytes (default 64 KiB): a longer one is refused
	// (ErrTooLarge) by a script that checks its length in Redis before
	// sending it, so that someone with write access to Redis cannot make
	// an agent read megabytes; a record that would seal longer is not
	// written.
	MaxValue int
}

// Redis is a shared store on Redis (or Sentinel).
type Redis struct {
	rdb      redis.UniversalClient
	prefix   string
	sealer   *Sealer
	timeout  time.Duration
	leaseTTL time.Duration
	replicas int
	maxValue int
	gens     generations
	observe  atomic.Pointer[func(op, result string)]
}

// Observe has f told of every store operation (get, put, delete, acquire,
// ping) and its result (ok, not_found, sealed, too_large, rollback, fenced,
// waited, taken_over, unreplicated, unavailable): the agent's metrics.
func (r *Redis) Observe(f func(op, result string)) { r.observe.Store(&f) }

func (r *Redis) note(op string, err error) {
	f := r.observe.Load()
	if f == nil {
		return
	}
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrNotFound):
		result = "not_found"
	case errors.Is(err, ErrTooLarge): // before ErrSealed, which it is too
		result = "too_large"
	case errors.Is(err, ErrRollback):
		result = "rollback"
	case errors.Is(err, ErrSealed):
		result = "sealed"
	case errors.Is(err, ErrFenced):
		result = "fenced"
	case errors.Is(err, errWaited):
		result = "waited"
	case errors.Is(err, errTakenOver):
		result = "taken_over"
	default:
		result = "unavailable"
	}
	(*f)(op, result)
}

// quiet drops go-redis's own log lines ("connection pool: failed to
// dial"): the store's errors reach the caller, who says them once.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quiet{}) }

// Open connects lazily: a Redis that is down at start is reported by Ping
// and by each call, and used again as soon as it answers.
func Open(o Options) (*Redis, error) {
	if o.Sealer == nil {
		return nil, fmt.Errorf("%w: a shared store needs --store-key-file (make one with signagent store-key --out FILE)", ErrBadKey)
	}
	uo, err := ParseURL(o.URL)
	if err != nil {
		return nil, err
	}
	uo.Password = o.Password
	if o.CAFile != "" {
		if uo.TLSConfig == nil {
			return nil, fmt.Errorf("%w: --store-ca-file is for rediss:// (TLS)", ErrBadURL)
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
	r := &Redis{prefix: o.Prefix, sealer: o.Sealer, timeout: o.Timeout, leaseTTL: o.LeaseTTL, replicas: o.WaitReplicas, maxValue: o.MaxValue}
	if r.maxValue <= 0 {
		r.maxValue = DefaultMaxValue
	}
	if r.replicas == 0 {
		r.replicas = 1
	}
	if r.prefix == "" {
		r.prefix = DefaultPrefix
	}
	if r.timeout <= 0 {
		r.timeout = DefaultTimeout
	}
	if r.leaseTTL <= 0 {
		r.leaseTTL = DefaultLeaseTTL
	}
	uo.DialTimeout, uo.ReadTimeout, uo.WriteTimeout = r.timeout, r.timeout, r.timeout
	uo.MaxRetries = 1
	uo.ContextTimeoutEnabled = true
	r.rdb = redis.NewUniversalClient(uo)
	return r, nil
}

// Close closes the connections.
func (r *Redis) Close() error { return r.rdb.Close() }

// keys are a record's data and lease keys; the hash tag keeps both in one
// slot of a Redis Cluster.
func (r *Redis) keys(kind, id string) (data, lease string) {
	base := r.prefix + "{" + r.sealer.Name(kind, id) + "}"
	return base, base + ":lease"
}

// call bounds one store call by the store's timeout and names a failure
// to answer ErrUnavailable.
func (r *Redis) call(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	err := f(ctx)
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	var re redis.Error
	if errors.As(err, &re) && !strings.HasPrefix(re.Error(), "LOADING") && !strings.HasPrefix(re.Error(), "READONLY") &&
		!strings.HasPrefix(re.Error(), "MASTERDOWN") && !strings.HasPrefix(re.Error(), "TRYAGAIN") {
		// The server answered, and refused (a wrong password: NOAUTH, WRONGPASS).
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

// Ping checks that the store answers.
func (r *Redis) Ping(ctx context.Context) error {
	err := r.call(ctx, func(ctx context.Context) error { return r.rdb.Ping(ctx).Err() })
	r.note("ping", err)
	return err
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

// read returns the sealed value kept at data: ErrNotFound when there is
// none, ErrTooLarge (not read) when it is longer than the bound, ErrSealed
// when the key holds something else than a record.
func (r *Redis) read(ctx context.Context, data string) ([]byte, error) {
	var res any
	err := r.call(ctx, func(ctx context.Context) (err error) {
		res, err = getScript.Run(ctx, r.rdb, []string{data}, r.maxValue).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	switch v := res.(type) {
	case string:
		if len(v) > r.maxValue { // the script sends none; not left to it alone
			return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, len(v), r.maxValue)
		}
		return []byte(v), nil
	case int64:
		switch {
		case v == -1:
			return nil, ErrNotFound
		case v == -2:
			return nil, fmt.Errorf("%w: the key holds no record (it is not a Redis hash)", ErrSealed)
		case v > int64(r.maxValue):
			return nil, fmt.Errorf("%w: %d bytes, more than %d; it was not read", ErrTooLarge, v, r.maxValue)
		}
	}
	return nil, fmt.Errorf("%w: not the answer of the store's read script", ErrUnavailable)
}

// Get returns the value kept for kind and id, opened; ErrNotFound when
// there is none, ErrSealed when it does not open, ErrTooLarge when it is
// over the bound (not read), ErrRollback when it is older than one this
// process has seen (ErrTooLarge and ErrRollback are ErrSealed too; none
// is used).
func (r *Redis) Get(ctx context.Context, kind, id string) (v []byte, err error) {
	defer func() { r.note("get", err) }()
	data, _ := r.keys(kind, id)
	floor := r.gens.highest(data)
	sealed, err := r.read(ctx, data)
	if err != nil {
		return nil, err
	}
	plain, gen, err := r.sealer.Open(kind, id, sealed)
	if err != nil {
		return nil, err
	}
	if err := r.gens.check(data, floor, gen); err != nil {
		return nil, err
	}
	return plain, nil
}

// putScript writes a value only for the lease's holder (the fence): an
// agent whose lease expired while it was paused cannot overwrite what the
// next holder wrote. ARGV: owner, value ("" deletes), ttl in ms (0: none).
// A key that is not a record is replaced.
var putScript = redis.NewScript(`
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) return 1 end
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 'v', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'ver', 1)
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) else redis.call('PERSIST', KEYS[1]) end
return 1`)

// Put keeps plain for kind and id, sealed with the next generation, for
// ttl (0: until replaced), under l, the identity's lease; ErrFenced when l
// is no longer held, ErrTooLarge (nothing written) when the sealed value
// would be over the bound.
func (r *Redis) Put(ctx context.Context, kind, id string, plain []byte, ttl time.Duration, l Lease) (err error) {
	defer func() { r.note("put", err) }()
	if n := len(plain) + Overhead; n > r.maxValue {
		return fmt.Errorf("%w: a record of %d bytes sealed is more than %d; it was not written", ErrTooLarge, n, r.maxValue)
	}
	data, lease := r.keys(kind, id)
	owner, err := r.holder(l, lease)
	if err != nil {
		return err
	}
	// The record's generation: the lease keeps the other agents from
	// writing until this write is done.
	var cur uint64
	switch sealed, err := r.read(ctx, data); {
	case err == nil:
		if _, g, err := r.sealer.Open(kind, id, sealed); err == nil {
			cur = g
		}
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrSealed):
		// None that opens: this agent's highest and its clock.
	default:
		return err
	}
	gen := r.gens.next(data, cur, time.Now())
	if err := r.write(ctx, data, lease, owner, string(r.sealer.Seal(kind, id, gen, plain)), ttl); err != nil {
		return err
	}
	r.gens.raise(data, gen)
	return nil
}

// Delete removes what is kept for kind and id, under l. The record is not
// to come back here: the generation this agent has seen is raised by one,
// so that the deleted record, put back, is refused as a rollback.
func (r *Redis) Delete(ctx context.Context, kind, id string, l Lease) (err error) {
	defer func() { r.note("delete", err) }()
	data, lease := r.keys(kind, id)
	owner, err := r.holder(l, lease)
	if err != nil {
		return err
	}
	if err := r.write(ctx, data, lease, owner, "", 0); err != nil {
		return err
	}
	r.gens.raise(data, r.gens.highest(data)+1)
	return nil
}

// holder is the owner of held when it is this store's lease on lease.
func (r *Redis) holder(held Lease, lease string) (string, error) {
	l, ok := held.(*redisLease)
	if !ok || l.r != r || l.key != lease {
		return "", fmt.Errorf("%w: no lease for this identity", ErrFenced)
	}
	return l.owner, nil
}

// write runs putScript: value at data ("" deletes it) for ttl, when owner
// holds lease.
func (r *Redis) write(ctx context.Context, data, lease, owner, value string, ttl time.Duration) error {
	var put int64
	err := r.call(ctx, func(ctx context.Context) (err error) {
		put, err = putScript.Run(ctx, r.rdb, []string{data, lease}, owner, value, ttl.Milliseconds()).Int64()
		return err
	})
	if err != nil {
		return err
	}
	if put != 1 {
		return ErrFenced
	}
	r.replicate(ctx)
	return nil
}

// replicate waits (WAIT, within the store's timeout) until as many
// replicas as asked, or as the master has, hold the last write. A write
// not replicated in time is counted ("put", "unreplicated") and kept: it
// is on the master, and the caller already holds what it wrote.
func (r *Redis) replicate(ctx context.Context) {
	if r.replicas < 0 {
		return
	}
	unreplicated := func() {
		if f := r.observe.Load(); f != nil {
			(*f)("put", "unreplicated")
		}
	}
	var role []any
	if err := r.call(ctx, func(ctx context.Context) (err error) {
		role, err = r.rdb.Do(ctx, "ROLE").Slice()
		return err
	}); err != nil {
		unreplicated() // not known to be replicated
		return
	}
	if len(role) < 3 || role[0] != "master" {
		return
	}
	have, _ := role[2].([]any)
	want := min(r.replicas, len(have))
	if want == 0 {
		return
	}
	var acked int64
	err := r.call(ctx, func(ctx context.Context) (err error) {
		acked, err = r.rdb.Do(ctx, "WAIT", want, (r.timeout / 2).Milliseconds()).Int64()
		return err
	})
	if err != nil || acked < int64(want) {
		unreplicated()
	}
}
