package store

import (
	"context"
	"time"
)

// Records is a store of records that several agents share, as the scheme
// caches use it (legacy tokens, trusted sessions, OpenID Connect
// records): values by kind and id, sealed by the store so that neither a
// value nor an identity is there in clear, and one lease per identity so
// that one agent at a time logs in, refreshes or writes it. The caches
// take a Records, never a particular store; a cache given none keeps its
// records in its own process's memory (or, for OpenID Connect, in the
// local files). *Shared, from Open, is the shared implementation over any
// backend; Obtain and DeleteIf are what the caches do with any.
type Records interface {
	// Get returns kind and id's value, opened: ErrNotFound when there is
	// none, ErrSealed when it is not to be used (it does not open with the
	// store's key; ErrTooLarge, over the store's bound; ErrRollback, older
	// than one already seen), an error wrapping ErrUnavailable when the
	// store does not answer.
	Get(ctx context.Context, kind, id string) ([]byte, error)
	// Put keeps plain for kind and id for ttl (0: until replaced), under
	// l, the identity's lease; ErrFenced when l is no longer held.
	Put(ctx context.Context, kind, id string, plain []byte, ttl time.Duration, l Lease) error
	// Delete removes kind and id's value, under l.
	Delete(ctx context.Context, kind, id string, l Lease) error
	// Acquire takes kind and id's lease, waiting while another holder has
	// it, until ctx ends.
	Acquire(ctx context.Context, kind, id string) (Lease, error)
	// Ping says whether the store answers.
	Ping(ctx context.Context) error
	// Observe has f told of every operation and its result ("ok",
	// "not_found", "sealed", "too_large", "rollback", "fenced",
	// "unavailable", ...), for the metrics.
	Observe(f func(op, result string))
}

// Lease is one holder's exclusive right to log in, refresh or write an
// identity, kept while it is held; Release gives it up.
type Lease interface {
	Release()
}
