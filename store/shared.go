package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Defaults of a shared store.
const (
	DefaultPrefix   = "signagent:"
	DefaultTimeout  = 2 * time.Second
	DefaultLeaseTTL = 8 * time.Second
	// DefaultMaxValue bounds a stored value, sealed (records are a few
	// KiB): a longer one is refused where it is kept, before it is sent.
	DefaultMaxValue = 64 << 10
)

// Options configure a shared store (its URL is Open's).
type Options struct {
	// Password is the store's password (from a file or the environment,
	// never the URL).
	Password string
	// CAFile is the CA bundle for rediss://, rediss+sentinel:// and
	// rediss+cluster:// (default: the system's).
	CAFile string
	// Insecure allows the password over plain TCP (redis://) to a node
	// beyond loopback; without it that is refused (ErrBadURL) before the
	// store is dialed, and for the nodes learnt later (Sentinel's master,
	// the cluster's map) when they are.
	Insecure bool
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
	// it counts as done, when the primary has that many (default 1; -1:
	// none): a failover then cannot bring back a refresh token already
	// spent at the provider.
	WaitReplicas int
	// MaxValue bounds a stored value's length, sealed (Overhead more than
	// the record), in bytes (default 64 KiB): a longer one is refused
	// (ErrTooLarge) where it is kept, before it is sent, so that someone
	// with write access to the store cannot make an agent read megabytes;
	// a record that would seal longer is not written.
	MaxValue int
	// AnnounceTTL is how long an agent's announcement of the formats it
	// reads lives without renewal (default 15s; formats.go).
	AnnounceTTL time.Duration
}

// Shared is a store several agents share: the sealed records, their
// generations, key names, leases and metrics, over a backend (Redis,
// Sentinel or Redis Cluster) that keeps the bytes.
type Shared struct {
	b        backend
	prefix   string
	sealer   *Sealer
	timeout  time.Duration
	leaseTTL time.Duration
	maxValue int
	gens     generations
	fmts     formats
	observe  atomic.Pointer[func(op, result string)]
	// beforeWrite, set by a test (export_test.go), runs once between a
	// Put's read and its write: what another agent does in between.
	beforeWrite func()
}

var _ Records = (*Shared)(nil)

func newShared(o Options) *Shared {
	s := &Shared{prefix: o.Prefix, sealer: o.Sealer, timeout: o.Timeout, leaseTTL: o.LeaseTTL, maxValue: o.MaxValue}
	if s.maxValue <= 0 {
		s.maxValue = DefaultMaxValue
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.leaseTTL <= 0 {
		s.leaseTTL = DefaultLeaseTTL
	}
	s.fmts.init(o.AnnounceTTL)
	return s
}

// Close withdraws this process's announcement, if it made one, and
// closes the connections.
func (s *Shared) Close() error {
	s.Withdraw()
	return s.b.close()
}

// Observe has f told of every store operation (get, put, delete, acquire,
// ping, convert, once) and its result (ok, not_found, sealed, too_large,
// rollback, format_newer, fenced, waited, taken_over, unreplicated, seen,
// unavailable): the agent's metrics.
func (s *Shared) Observe(f func(op, result string)) { s.observe.Store(&f) }

func (s *Shared) note(op string, err error) {
	f := s.observe.Load()
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
	case errors.Is(err, ErrFormatNewer):
		result = "format_newer"
	case errors.Is(err, ErrSealed):
		result = "sealed"
	case errors.Is(err, ErrFenced):
		result = "fenced"
	case errors.Is(err, errWaited):
		result = "waited"
	case errors.Is(err, errTakenOver):
		result = "taken_over"
	case errors.Is(err, errUnreplicated):
		result = "unreplicated"
	case errors.Is(err, errSeen):
		result = "seen"
	default:
		result = "unavailable"
	}
	(*f)(op, result)
}

// keys are a record's data and lease keys; the hash tag keeps both in one
// slot of a Redis Cluster.
func (s *Shared) keys(kind, id string) (data, lease string) {
	base := s.prefix + "{" + s.sealer.Name(kind, id) + "}"
	return base, base + ":lease"
}

// bounded runs f with ctx bounded by the store's timeout.
func (s *Shared) bounded(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return f(ctx)
}

// Ping checks that the store answers.
func (s *Shared) Ping(ctx context.Context) error {
	err := s.bounded(ctx, s.b.ping)
	s.note("ping", err)
	return err
}

// read returns the sealed value kept at data, within the bound.
func (s *Shared) read(ctx context.Context, data string) (v []byte, err error) {
	err = s.bounded(ctx, func(ctx context.Context) (err error) {
		v, err = s.b.get(ctx, data, s.maxValue)
		return err
	})
	if err == nil && len(v) > s.maxValue { // the backend sends none; not left to it alone
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, len(v), s.maxValue)
	}
	return v, err
}

// Get returns the value kept for kind and id, opened; ErrNotFound when
// there is none, ErrSealed when it does not open, ErrTooLarge when it is
// over the bound (not read), ErrRollback when it is older than one this
// process has seen (ErrTooLarge and ErrRollback are ErrSealed too; none
// is used), a *FormatError (ErrFormatNewer, not ErrSealed: it is neither
// used nor to be replaced) when it is of a format newer than this process
// reads and no live agent rewrites it in an older one in time
// (convert.go).
func (s *Shared) Get(ctx context.Context, kind, id string) (v []byte, err error) {
	defer func() { s.note("get", err) }()
	data, _ := s.keys(kind, id)
	floor := s.gens.highest(data)
	sealed, err := s.read(ctx, data)
	if err != nil {
		return nil, err
	}
	plain, gen, err := s.open(ctx, kind, id, sealed)
	if fe := (*FormatError)(nil); errors.As(err, &fe) {
		if sealed, err = s.awaitOlder(ctx, data, fe); err != nil {
			return nil, err
		}
		plain, gen, err = s.open(ctx, kind, id, sealed)
	}
	if err != nil {
		return nil, err
	}
	if err := s.gens.check(data, floor, gen); err != nil {
		return nil, err
	}
	return plain, nil
}

// Put keeps plain for kind and id, sealed with the next generation in the
// format every live agent reads, for ttl (0: until replaced), under l, the
// identity's lease; ErrFenced when l is no longer held, ErrTooLarge
// (nothing written) when the sealed value would be over the bound, a
// *FormatError (nothing written) when the record there is of a format
// newer than this process reads: it is never overwritten by one that
// cannot read it.
func (s *Shared) Put(ctx context.Context, kind, id string, plain []byte, ttl time.Duration, l Lease) (err error) {
	defer func() { s.note("put", err) }()
	format := s.writeFormat(ctx)
	if n := len(plain) + s.overhead(format, id); n > s.maxValue {
		return fmt.Errorf("%w: a record of %d bytes sealed is more than %d; it was not written", ErrTooLarge, n, s.maxValue)
	}
	data, lease := s.keys(kind, id)
	owner, err := s.holder(l, lease)
	if err != nil {
		return err
	}
	// A record rewritten in another format meanwhile (convert.go, without
	// the lease) is read again, once: written over, it would look to the
	// agents that read it rewritten like a rollback.
	for attempt := 1; ; attempt++ {
		err := s.put(ctx, format, kind, id, plain, ttl, data, lease, owner)
		if !errors.Is(err, errChanged) || attempt == 2 {
			return err
		}
	}
}

// put is one of Put's attempts: it reads the record's generation (the
// lease keeps the other agents from writing until this write is done) and
// writes the next one, only while the record is still the one read.
func (s *Shared) put(ctx context.Context, format int, kind, id string, plain []byte, ttl time.Duration, data, lease, owner string) error {
	var cur uint64
	var read []byte // nil: not compared (a value over the bound, not read)
	switch sealed, err := s.read(ctx, data); {
	case err == nil:
		read = sealed
		_, g, err := s.open(ctx, kind, id, sealed)
		if fe := (*FormatError)(nil); errors.As(err, &fe) {
			return err
		}
		if err == nil {
			cur = g
		}
	case errors.Is(err, ErrTooLarge):
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrSealed):
		// None that opens: this agent's highest and its clock.
		read = []byte{}
	default:
		return err
	}
	gen := s.gens.next(data, cur, time.Now())
	value := s.seal(format, kind, id, gen, plain, ttl)
	if f := s.beforeWrite; f != nil {
		s.beforeWrite = nil
		f()
	}
	if err := s.write(ctx, func(ctx context.Context) error { return s.b.put(ctx, data, lease, owner, read, value, ttl) }); err != nil {
		return err
	}
	s.gens.raise(data, gen)
	return nil
}

// Delete removes what is kept for kind and id, under l. The record is not
// to come back here: the generation this agent has seen is raised by one,
// so that the deleted record, put back, is refused as a rollback.
func (s *Shared) Delete(ctx context.Context, kind, id string, l Lease) (err error) {
	defer func() { s.note("delete", err) }()
	data, lease := s.keys(kind, id)
	owner, err := s.holder(l, lease)
	if err != nil {
		return err
	}
	if err := s.write(ctx, func(ctx context.Context) error { return s.b.del(ctx, data, lease, owner) }); err != nil {
		return err
	}
	s.gens.raise(data, s.gens.highest(data)+1)
	return nil
}

// write runs a fenced write. One done but not confirmed by the replicas
// is counted ("put", "unreplicated") and kept: it is on the primary, and
// the caller already holds what it wrote.
func (s *Shared) write(ctx context.Context, f func(context.Context) error) error {
	err := s.bounded(ctx, f)
	if errors.Is(err, errUnreplicated) {
		s.note("put", err)
		return nil
	}
	return err
}

// holder is the owner of held when it is this store's lease on lease.
func (s *Shared) holder(held Lease, lease string) (string, error) {
	l, ok := held.(*sharedLease)
	if !ok || l.s != s || l.key != lease {
		return "", fmt.Errorf("%w: no lease for this identity", ErrFenced)
	}
	return l.owner, nil
}

// open opens a value kept for kind and id in any format this process
// reads; a *FormatError when it is of a newer one, whether or not an agent
// that reads it is live: a rollback that stopped every newer agent must
// not sign anyone out (docs/upgrading.md). A value forged with a newer
// format's first byte thus answers store_format_newer until it is
// removed (signagent oidc logout); whoever can write the store can remove
// records anyway.
func (s *Shared) open(ctx context.Context, kind, id string, sealed []byte) ([]byte, uint64, error) {
	switch f := int(sealed0(sealed)); {
	case len(sealed) >= Overhead && f > s.fmts.newest && f <= maxFormat:
		return nil, 0, &FormatError{Format: f, Reads: s.fmts.newest}
	case len(sealed) > 0 && sealed[0] == format3:
		_, plain, gen, _, err := s.sealer.open3(kind, s.sealer.Name(kind, id), sealed)
		return plain, gen, err
	}
	return s.sealer.Open(kind, id, sealed)
}

func sealed0(sealed []byte) byte {
	if len(sealed) == 0 {
		return 0
	}
	return sealed[0]
}

// seal seals plain for kind and id in format, expiring after ttl (0:
// none; only format 3 carries it).
func (s *Shared) seal(format int, kind, id string, gen uint64, plain []byte, ttl time.Duration) []byte {
	if format == format3 {
		var expiry int64
		if ttl > 0 {
			expiry = time.Now().Add(ttl).UnixMilli()
		}
		return s.sealer.seal3(kind, id, gen, expiry, plain)
	}
	return s.sealer.Seal(kind, id, gen, plain)
}

// overhead is what sealing in format adds to a value of identity id.
func (s *Shared) overhead(format int, id string) int {
	if format == format3 {
		return overhead3(id)
	}
	return Overhead
}
