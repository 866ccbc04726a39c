package store_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// results counts a store's operations by "op result".
type results struct {
	mu sync.Mutex
	m  map[string]int
}

func observe(r *store.Shared) *results {
	c := &results{m: map[string]int{}}
	r.Observe(func(op, result string) {
		c.mu.Lock()
		c.m[op+" "+result]++
		c.mu.Unlock()
	})
	return c
}

func (c *results) n(opResult string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[opResult]
}

// put writes v for kind and id under a lease of its own.
func put(t *testing.T, r *store.Shared, kind, id string, v []byte) error {
	t.Helper()
	ctx := context.Background()
	l, err := r.Acquire(ctx, kind, id)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	return r.Put(ctx, kind, id, v, 0, l)
}

// dataKey is where kind and id's record is in Redis (default prefix).
func dataKey(s *store.Sealer, kind, id string) string {
	return "signagent:{" + s.Name(kind, id) + "}"
}

// bed is a store on a redis-server of its own (or a cluster), what it
// counts, a raw client to the same Redis, and where oidc/crm's record is
// there.
type bed struct {
	url     string
	s       *store.Sealer
	r       *store.Shared
	counted *results
	raw     redis.UniversalClient
	k       string
}

func newBed(t *testing.T) *bed {
	srv := storetest.Start(t)
	return bedOn(t, srv.URL(), redis.NewClient(&redis.Options{Addr: srv.Addr}))
}

// bedOn is a bed on the Redis at url, which raw reaches too.
func bedOn(t *testing.T, url string, raw redis.UniversalClient) *bed {
	b := &bed{url: url, raw: raw}
	b.s, _ = store.NewSealer(key(1))
	b.r = b.agent(t)
	b.counted = observe(b.r)
	t.Cleanup(func() { b.raw.Close() })
	b.k = dataKey(b.s, "oidc", "crm")
	return b
}

// agent is another store on the bed's Redis and key: another agent.
func (b *bed) agent(t *testing.T) *store.Shared {
	return openStore(t, b.url, store.Options{Sealer: b.s})
}

// remade checks that a cache's Obtain takes oidc/crm's record as absent
// (not to be used) and writes what it makes instead.
func remade(t *testing.T, r *store.Shared, made string) {
	t.Helper()
	v, fromStore, err := store.Obtain(context.Background(), r, "oidc", "crm", func([]byte) bool { return true },
		func(context.Context) ([]byte, time.Duration, error) { return []byte(made), 0, nil })
	if err != nil || fromStore || string(v) != made {
		t.Fatalf("Obtain: %q %v %v, want %q made anew", v, fromStore, err, made)
	}
}

// allocated runs f and returns the bytes it allocated in this process
// (TotalAlloc's growth) and the heap's growth before any collection
// (HeapAlloc's): what the agent's memory does while f runs.
func allocated(f func()) (total, heap int64) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc), int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// TestValueBound: a value exactly at the bound is read; one byte over is
// refused by Redis before it is sent (a 32 MiB value makes the agent
// allocate a few KiB, not 32 MiB), counted as too_large, and left as it
// was in Redis; a record that would seal over the bound is not written; a
// key that is not a record is refused and replaced by the next write.
func TestValueBound(t *testing.T) { testValueBound(t, newBed(t)) }

func testValueBound(t *testing.T, b *bed) {
	ctx, s, r, counted, raw, k := context.Background(), b.s, b.r, b.counted, b.raw, b.k
	bound := store.DefaultMaxValue

	atBound := bytes.Repeat([]byte("a"), bound-store.Overhead)
	if err := put(t, r, "oidc", "crm", atBound); err != nil {
		t.Fatalf("a record that seals to the bound: %v", err)
	}
	if n, _ := raw.HStrLen(ctx, k, "v").Result(); n != int64(bound) {
		t.Fatalf("sealed %d bytes, want %d", n, bound)
	}
	if v, err := r.Get(ctx, "oidc", "crm"); err != nil || !bytes.Equal(v, atBound) {
		t.Fatalf("a value at the bound: %d bytes, %v", len(v), err)
	}

	// One byte more is not written: no agent could read it.
	err := put(t, r, "oidc", "crm", append(atBound, 'a'))
	if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), "more than 65536") || counted.n("put too_large") != 1 {
		t.Fatalf("a record that seals one byte over the bound: %v, counted %d", err, counted.n("put too_large"))
	}
	if n, _ := raw.HStrLen(ctx, k, "v").Result(); n != int64(bound) {
		t.Fatalf("the refused write changed the record: %d bytes", n)
	}

	// One byte over, written by someone with access to Redis (a value
	// that would open: only its length is wrong).
	over := s.Seal("oidc", "crm", uint64(time.Now().UnixMicro()), append(atBound, 'b'))
	raw.HSet(ctx, k, "v", over)
	_, err = r.Get(ctx, "oidc", "crm")
	if !errors.Is(err, store.ErrTooLarge) || !errors.Is(err, store.ErrSealed) || !strings.Contains(err.Error(), "65537 bytes, more than 65536") {
		t.Fatalf("one byte over: %v", err)
	}
	if counted.n("get too_large") != 1 || counted.n("get sealed") != 0 {
		t.Fatalf("counted: %v", counted.m)
	}
	if v, _ := raw.HGet(ctx, k, "v").Result(); v != string(over) {
		t.Fatal("the refusal changed the value in Redis")
	}

	// 32 MiB: Redis keeps it; the agent does not read it.
	huge := make([]byte, 32<<20)
	huge[0] = 2
	if err := raw.HSet(ctx, k, "v", huge).Err(); err != nil {
		t.Fatal(err)
	}
	total, heap := allocated(func() { _, err = r.Get(ctx, "oidc", "crm") })
	t.Logf("a Get of a 32 MiB value: %d bytes allocated, heap %+d bytes", total, heap)
	if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), "33554432 bytes") {
		t.Fatalf("32 MiB: %v", err)
	}
	if total > 1<<20 {
		t.Fatalf("a Get of a 32 MiB value allocated %d bytes: the value was read", total)
	}
	if n, _ := raw.HStrLen(ctx, k, "v").Result(); n != 32<<20 || counted.n("get too_large") != 2 {
		t.Fatalf("after the refusal: %d bytes in Redis, %d counted", n, counted.n("get too_large"))
	}

	// A cache's Obtain takes it as absent and writes what it makes.
	remade(t, r, "made again")
	if v, err := r.Get(ctx, "oidc", "crm"); err != nil || string(v) != "made again" {
		t.Fatalf("after Obtain: %q %v", v, err)
	}

	// A key that is not a record (a string): refused as one that does not
	// open, then replaced by the next write.
	raw.Set(ctx, k, strings.Repeat("x", 1<<20), 0)
	if _, err := r.Get(ctx, "oidc", "crm"); !errors.Is(err, store.ErrSealed) || errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), "not a Redis hash") {
		t.Fatalf("a string key: %v", err)
	}
	if err := put(t, r, "oidc", "crm", []byte("a record again")); err != nil {
		t.Fatalf("a write over a string key: %v", err)
	}
	if v, err := r.Get(ctx, "oidc", "crm"); err != nil || string(v) != "a record again" {
		t.Fatalf("after the write: %q %v", v, err)
	}
	// A hash without the value field is no record.
	raw.Del(ctx, k)
	raw.HSet(ctx, k, "ver", 3)
	if _, err := r.Get(ctx, "oidc", "crm"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a hash without a value: %v", err)
	}

	// The bound is the store's option.
	small := openStore(t, b.url, store.Options{Sealer: s, MaxValue: 100})
	if err := put(t, small, "oidc", "small", make([]byte, 100-store.Overhead)); err != nil {
		t.Fatal(err)
	}
	if _, err := small.Get(ctx, "oidc", "small"); err != nil {
		t.Fatal(err)
	}
	if err := put(t, small, "oidc", "small", make([]byte, 101-store.Overhead)); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("over a bound of 100: %v", err)
	}
	if err := put(t, r, "oidc", "small", make([]byte, 101-store.Overhead)); err != nil {
		t.Fatal(err)
	}
	if _, err := small.Get(ctx, "oidc", "small"); !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), "101 bytes, more than 100") {
		t.Fatalf("over a bound of 100: %v", err)
	}
}

// TestRollback: a record put back in Redis after a newer one was read or
// written here is refused (counted, left in Redis as it is); a cache's
// Obtain then writes a new one above both. What stays possible: an agent
// that never saw the newer record takes the older one.
func TestRollback(t *testing.T) { testRollback(t, newBed(t)) }

func testRollback(t *testing.T, b *bed) {
	ctx, s, a, counted, raw, k := context.Background(), b.s, b.r, b.counted, b.raw, b.k

	if err := put(t, a, "oidc", "crm", []byte("refresh token 1")); err != nil {
		t.Fatal(err)
	}
	first, _ := raw.HGet(ctx, k, "v").Result()
	if v, err := a.Get(ctx, "oidc", "crm"); err != nil || string(v) != "refresh token 1" {
		t.Fatalf("%q %v", v, err)
	}
	if err := put(t, a, "oidc", "crm", []byte("refresh token 2")); err != nil {
		t.Fatal(err)
	}
	second, _ := raw.HGet(ctx, k, "v").Result()
	raw.HSet(ctx, k, "v", first) // put back
	_, err := a.Get(ctx, "oidc", "crm")
	if !errors.Is(err, store.ErrRollback) || !errors.Is(err, store.ErrSealed) || !strings.Contains(err.Error(), "older record put back") {
		t.Fatalf("a record put back: %v", err)
	}
	if strings.Contains(err.Error(), "refresh token") || counted.n("get rollback") != 1 || counted.n("get sealed") != 0 {
		t.Fatalf("%v, counted %v", err, counted.m)
	}
	if v, _ := raw.HGet(ctx, k, "v").Result(); v != first {
		t.Fatal("the refusal changed the value in Redis")
	}
	// The newer one put back is read again.
	raw.HSet(ctx, k, "v", second)
	if v, err := a.Get(ctx, "oidc", "crm"); err != nil || string(v) != "refresh token 2" {
		t.Fatalf("the newer record: %q %v", v, err)
	}

	// What remains: an agent that never read the newer record (one just
	// started, the CLI) cannot tell.
	raw.HSet(ctx, k, "v", first)
	fresh := b.agent(t)
	if v, err := fresh.Get(ctx, "oidc", "crm"); err != nil || string(v) != "refresh token 1" {
		t.Fatalf("a fresh agent: %q %v", v, err)
	}

	// Obtain takes the rolled-back record as absent and writes anew,
	// above the generation it refused.
	remade(t, a, "refresh token 3")
	if v, err := fresh.Get(ctx, "oidc", "crm"); err != nil || string(v) != "refresh token 3" {
		t.Fatalf("the fresh agent after the new write: %q %v", v, err)
	}

	// A deleted record put back is refused by the agent that deleted it.
	third, _ := raw.HGet(ctx, k, "v").Result()
	l, _ := a.Acquire(ctx, "oidc", "crm")
	if err := a.Delete(ctx, "oidc", "crm", l); err != nil {
		t.Fatal(err)
	}
	l.Release()
	raw.HSet(ctx, k, "v", third)
	if _, err := a.Get(ctx, "oidc", "crm"); !errors.Is(err, store.ErrRollback) {
		t.Fatalf("a deleted record put back: %v", err)
	}

	// A record written after one was deleted or expired, by an agent that
	// never saw it (the CLI signing in again after a logout), is no
	// rollback to the agents that did: its generation is at least its
	// writer's clock.
	raw.Del(ctx, k)
	time.Sleep(time.Millisecond) // a new microsecond, as between two real writes
	if err := put(t, b.agent(t), "oidc", "crm", []byte("signed in again")); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Get(ctx, "oidc", "crm"); err != nil || string(v) != "signed in again" {
		t.Fatalf("a new record after a delete: %q %v", v, err)
	}
	// One written over a record its writer never read takes that record's
	// generation and one more, whatever the writer's clock says (here the
	// record's came from a clock an hour ahead).
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
	raw.HSet(ctx, k, "v", s.Seal("oidc", "crm", ahead, []byte("from a clock an hour ahead")))
	if v, err := a.Get(ctx, "oidc", "crm"); err != nil || string(v) != "from a clock an hour ahead" {
		t.Fatalf("%q %v", v, err)
	}
	if err := put(t, b.agent(t), "oidc", "crm", []byte("written over")); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Get(ctx, "oidc", "crm"); err != nil || string(v) != "written over" {
		t.Fatalf("a record written over one the writer never read: %q %v", v, err)
	}
	// Counted: the first record put back, twice in Obtain (a read, and one
	// more under the lease), the deleted one.
	if n := counted.n("get rollback"); n != 4 {
		t.Fatalf("%d rollbacks counted, want 4", n)
	}
}

// TestRollbackNotRaced: reads racing this agent's own writes of the same
// identity are never taken for rollbacks (a read sent before a write
// returns the older generation after it).
func TestRollbackNotRaced(t *testing.T) {
	t.Parallel()
	srv := storetest.Start(t)
	ctx := context.Background()
	a := openStore(t, srv.URL(), store.Options{})
	counted := observe(a)
	if err := put(t, a, "legacy", "alice", []byte("0")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := a.Get(ctx, "legacy", "alice"); err != nil {
					t.Errorf("a read during writes: %v", err)
					return
				}
			}
		})
	}
	for i := range 100 {
		if err := put(t, a, "legacy", "alice", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if n := counted.n("get rollback"); n != 0 || counted.n("get ok") < 100 {
		t.Fatalf("%d rollbacks in %d reads", n, counted.n("get ok"))
	}
}
