// Package flight runs one flow (a login, a trusted authentication) for all
// the callers that ask for the same key at once, and tells them apart: the
// first to take the result learns where it came from (a login, the shared
// store), the others that it was there for them (FromMemory), so that a
// login is counted once however many waited on it. Each caller waits
// until the flow ends or its own context does; the flow itself does not
// end with any one caller (the caller gives it its own deadline).
package flight

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/singleflight"
)

// FromMemory is the source of a value the caller did not cause to be
// obtained: it was in memory, or another caller's flow obtained it.
const FromMemory = "memory"

// Group runs the flows of values of type T. The zero Group is ready.
type Group[T any] struct{ g singleflight.Group }

type result[T any] struct {
	v       T
	from    string
	claimed *atomic.Bool
}

// Do runs fn once for the callers of key that overlap it; fn returns the
// value and where it came from.
func (g *Group[T]) Do(ctx context.Context, key string, fn func() (T, string, error)) (T, string, error) {
	ch := g.g.DoChan(key, func() (any, error) {
		v, from, err := fn()
		if err != nil {
			return nil, err
		}
		return result[T]{v, from, new(atomic.Bool)}, nil
	})
	var zero T
	select {
	case r := <-ch:
		if r.Err != nil {
			return zero, "", r.Err
		}
		res := r.Val.(result[T])
		if res.from != FromMemory && !res.claimed.CompareAndSwap(false, true) {
			return res.v, FromMemory, nil
		}
		return res.v, res.from, nil
	case <-ctx.Done():
		return zero, "", ctx.Err()
	}
}
