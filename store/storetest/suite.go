package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/store"
)

// Run is the one backend suite: what the caches rely on from a shared
// store, asked of the store at url (any backend Open knows: redis://,
// rediss://, redis+sentinel://, redis+cluster://, ...) through store.Open
// and the store's own interface only, so that every backend answers the
// same questions. o is the backend's connection (Password, CAFile,
// Insecure); Run sets the sealer, the bounds and the lease's lifetime
// itself, on a prefix of its own, so that suites on one server do not
// meet.
//
// It asks: a record round trip and a missing one; a value sealed under
// another key refused (ErrSealed), not read; a write under a released
// lease fenced (ErrFenced); one holder per identity (a second Acquire
// waits until the first releases); a holder that dies without releasing
// taken over once its lease's lifetime has passed; a record with a
// lifetime gone after it; a delete; the value bound kept (ErrTooLarge,
// nothing written); Once true once per identity; Ping; every identity of
// a kind apart from every other.
func Run(t *testing.T, url string, o store.Options) {
	t.Helper()
	var n atomic.Int64
	open := func(t *testing.T, key byte, change func(*store.Options)) *store.Shared {
		t.Helper()
		oo := o
		oo.Sealer, _ = store.NewSealer(bytes.Repeat([]byte{key}, 32))
		oo.Prefix = fmt.Sprintf("suite-%s-%d:", t.Name(), n.Add(1))
		if change != nil {
			change(&oo)
		}
		s, err := store.Open(url, oo)
		if err != nil {
			t.Fatalf("open %s: %v", url, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	// pair opens two agents of one fleet (one key, one prefix).
	pair := func(t *testing.T, change func(*store.Options)) (*store.Shared, *store.Shared) {
		t.Helper()
		oo := o
		oo.Sealer, _ = store.NewSealer(bytes.Repeat([]byte{1}, 32))
		oo.Prefix = fmt.Sprintf("suite-%s-%d:", t.Name(), n.Add(1))
		if change != nil {
			change(&oo)
		}
		var s [2]*store.Shared
		for i := range s {
			var err error
			if s[i], err = store.Open(url, oo); err != nil {
				t.Fatalf("open %s: %v", url, err)
			}
			t.Cleanup(func() { s[i].Close() })
		}
		return s[0], s[1]
	}
	ctx := func(t *testing.T) context.Context {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		return c
	}
	put := func(t *testing.T, s *store.Shared, kind, id string, v []byte, ttl time.Duration) error {
		t.Helper()
		l, err := s.Acquire(ctx(t), kind, id)
		if err != nil {
			t.Fatalf("acquire %s/%s: %v", kind, id, err)
		}
		defer l.Release()
		return s.Put(ctx(t), kind, id, v, ttl, l)
	}

	t.Run("round trip", func(t *testing.T) {
		t.Parallel()
		a, b := pair(t, nil)
		if err := put(t, a, "oidc", "crm", []byte("a record"), 0); err != nil {
			t.Fatal(err)
		}
		if v, err := b.Get(ctx(t), "oidc", "crm"); err != nil || string(v) != "a record" {
			t.Fatalf("the other agent read %q, %v", v, err)
		}
		if _, err := b.Get(ctx(t), "oidc", "hr"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a missing identity: %v, want ErrNotFound", err)
		}
		if _, err := b.Get(ctx(t), "legacy", "crm"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the same identity of another kind: %v, want ErrNotFound", err)
		}
		if err := b.Ping(ctx(t)); err != nil {
			t.Fatalf("ping: %v", err)
		}
	})

	t.Run("sealed under another key", func(t *testing.T) {
		t.Parallel()
		prefix := fmt.Sprintf("suite-%s-%d:", t.Name(), n.Add(1))
		a := open(t, 1, func(oo *store.Options) { oo.Prefix = prefix })
		// The same prefix, another key: an agent given the wrong key file.
		other := open(t, 2, func(oo *store.Options) { oo.Prefix = prefix })
		if err := put(t, a, "trusted", "alice", []byte("an auth.sid"), 0); err != nil {
			t.Fatal(err)
		}
		v, err := other.Get(ctx(t), "trusted", "alice")
		if err == nil || !errors.Is(err, store.ErrSealed) && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("read under another key: %q, %v; want ErrSealed or ErrNotFound (the key names its records)", v, err)
		}
	})

	t.Run("fenced", func(t *testing.T) {
		t.Parallel()
		a := open(t, 1, nil)
		l, err := a.Acquire(ctx(t), "legacy", "bob")
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		if err := a.Put(ctx(t), "legacy", "bob", []byte("late"), 0, l); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("a write under a released lease: %v, want ErrFenced", err)
		}
		if _, err := a.Get(ctx(t), "legacy", "bob"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the fenced write was kept: %v", err)
		}
	})

	t.Run("one holder", func(t *testing.T) {
		t.Parallel()
		a, b := pair(t, nil)
		l, err := a.Acquire(ctx(t), "oidc", "crm")
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if l2, err := b.Acquire(short, "oidc", "crm"); err == nil {
			l2.Release()
			t.Fatal("a second holder while the first holds the lease")
		}
		got := make(chan error, 1)
		go func() {
			l2, err := b.Acquire(ctx(t), "oidc", "crm")
			if err == nil {
				l2.Release()
			}
			got <- err
		}()
		l.Release()
		if err := <-got; err != nil {
			t.Fatalf("the lease once released: %v", err)
		}
	})

	t.Run("take-over", func(t *testing.T) {
		t.Parallel()
		ttl := 500 * time.Millisecond
		dead, next := pair(t, func(oo *store.Options) { oo.LeaseTTL = ttl })
		if _, err := dead.Acquire(ctx(t), "legacy", "alice"); err != nil {
			t.Fatal(err)
		}
		dead.Close() // no renewal, no release: as SIGKILL leaves it
		l, err := next.Acquire(ctx(t), "legacy", "alice")
		if err != nil {
			t.Fatalf("the dead holder's lease was not taken over: %v", err)
		}
		defer l.Release()
		if err := next.Put(ctx(t), "legacy", "alice", []byte("v"), 0, l); err != nil {
			t.Fatalf("a write after the take-over: %v", err)
		}
	})

	t.Run("lifetime and delete", func(t *testing.T) {
		t.Parallel()
		a := open(t, 1, nil)
		if err := put(t, a, "legacy", "short", []byte("v"), time.Second); err != nil {
			t.Fatal(err)
		}
		if err := put(t, a, "legacy", "kept", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		l, err := a.Acquire(ctx(t), "legacy", "kept")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Delete(ctx(t), "legacy", "kept", l); err != nil {
			t.Fatal(err)
		}
		l.Release()
		if _, err := a.Get(ctx(t), "legacy", "kept"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted: %v, want ErrNotFound", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := a.Get(ctx(t), "legacy", "short")
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if err != nil || time.Now().After(deadline) {
				t.Fatalf("a record with a lifetime of 1s, 10s on: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("value bound", func(t *testing.T) {
		t.Parallel()
		const bound = 4096
		a := open(t, 1, func(oo *store.Options) { oo.MaxValue = bound })
		if err := put(t, a, "oidc", "at", bytes.Repeat([]byte("a"), bound-store.Overhead), 0); err != nil {
			t.Fatalf("a record that seals to the bound: %v", err)
		}
		if err := put(t, a, "oidc", "over", bytes.Repeat([]byte("a"), bound-store.Overhead+1), 0); !errors.Is(err, store.ErrTooLarge) {
			t.Fatalf("a record one byte over: %v, want ErrTooLarge", err)
		}
		if _, err := a.Get(ctx(t), "oidc", "over"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the record over the bound was written: %v", err)
		}
	})

	t.Run("once", func(t *testing.T) {
		t.Parallel()
		a, b := pair(t, nil)
		first, err := a.Once(ctx(t), "challenge", "t1", time.Minute)
		if err != nil || !first {
			t.Fatalf("first: %v, %v", first, err)
		}
		if again, err := b.Once(ctx(t), "challenge", "t1", time.Minute); err != nil || again {
			t.Fatalf("the same mark from another agent: first=%v, %v", again, err)
		}
		if other, err := b.Once(ctx(t), "challenge", "t2", time.Minute); err != nil || !other {
			t.Fatalf("another mark: first=%v, %v", other, err)
		}
	})
}
