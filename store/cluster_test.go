package store_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// TestCluster: a store on a real three-master Redis Cluster
// (redis+cluster://) behaves as on one server: leases and fences, a
// take-over, the value bound checked in Redis, sealing and the rollback
// check (the same tests, run on the cluster). An identity's record and
// lease are in one slot, and the identities spread over the masters; a
// record whose slot is moved to another master is read and written
// there (the client follows MOVED); the store is not ready while a
// master does not answer.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := storetest.StartCluster(t, 3)
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr
	}
	raw := func() *redis.ClusterClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}) }
	flush := func() {
		for _, m := range c.Masters {
			storetest.Command(m.Addr, "FLUSHALL")
		}
	}
	keys := func() []string {
		var all []string
		for _, m := range c.Masters {
			all = append(all, strings.Fields(storetest.Command(m.Addr, "KEYS", "*"))...)
		}
		return all
	}

	t.Run("layout", func(t *testing.T) {
		// Thirty identities written, their leases still held: each lease
		// is on the master that holds its record, and the records are on
		// every master.
		ctx := context.Background()
		r := openStore(t, c.URL(), store.Options{})
		for i := range 30 {
			id := fmt.Sprintf("user-%d", i)
			l, err := r.Acquire(ctx, "legacy", id)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			if err := r.Put(ctx, "legacy", id, []byte("a token"), 0, l); err != nil {
				t.Fatal(err)
			}
		}
		holding := 0
		for _, m := range c.Masters {
			here := strings.Fields(storetest.Command(m.Addr, "KEYS", "*"))
			records := 0
			for _, k := range here {
				if data, ok := strings.CutSuffix(k, ":lease"); ok {
					if storetest.Command(m.Addr, "EXISTS", data) != "1" {
						t.Errorf("%s: the lease %s is here, its record is not", m.Addr, k)
					}
				} else {
					records++
				}
			}
			if records > 0 {
				holding++
			}
		}
		if n := len(keys()); n != 60 {
			t.Fatalf("%d keys for 30 records and their leases", n)
		}
		if holding != len(c.Masters) {
			t.Fatalf("30 identities on %d of %d masters", holding, len(c.Masters))
		}
	})
	t.Run("lease and fence", func(t *testing.T) {
		flush()
		r := raw()
		defer r.Close()
		testLeaseAndFence(t, c.URL(), r, keys)
	})
	t.Run("take over", func(t *testing.T) {
		flush()
		testLeaseTakeOver(t, c.URL())
	})
	t.Run("value bound", func(t *testing.T) {
		flush()
		testValueBound(t, bedOn(t, c.URL(), raw()))
	})
	t.Run("rollback", func(t *testing.T) {
		flush()
		testRollback(t, bedOn(t, c.URL(), raw()))
	})
	t.Run("resharded", func(t *testing.T) {
		flush()
		ctx := context.Background()
		b := bedOn(t, c.URL(), raw())
		if err := put(t, b.r, "oidc", "crm", []byte("before the move")); err != nil {
			t.Fatal(err)
		}
		from := c.Owner(t, b.k)
		to := c.Masters[0]
		if to == from {
			to = c.Masters[1]
		}
		moveSlot(t, c, b.k, from, to)
		if got := c.Owner(t, b.k); got != to {
			t.Fatalf("the slot is on %s, want %s", got.Addr, to.Addr)
		}
		if v, err := b.r.Get(ctx, "oidc", "crm"); err != nil || string(v) != "before the move" {
			t.Fatalf("after the move: %q %v", v, err)
		}
		if err := put(t, b.r, "oidc", "crm", []byte("after the move")); err != nil {
			t.Fatalf("a write after the move: %v", err)
		}
		if v := storetest.Command(to.Addr, "HGET", b.k, "v"); v == "" || storetest.Command(from.Addr, "EXISTS", b.k) == "1" {
			t.Fatalf("the record is not on the master its slot moved to")
		}
		if v, err := b.agent(t).Get(ctx, "oidc", "crm"); err != nil || string(v) != "after the move" {
			t.Fatalf("another agent after the move: %q %v", v, err)
		}
	})
	t.Run("key check", func(t *testing.T) {
		flush()
		b := bedOn(t, c.URL(), raw())
		sealer2, _ := store.NewSealer(key(2))
		other := openStore(t, c.URL(), store.Options{Sealer: sealer2})
		for i := range 12 { // spread over the masters by their names
			r := b.r
			if i%3 == 0 {
				r = other
			}
			if err := put(t, r, "oidc", fmt.Sprint("p", i), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		looked, foreign, err := b.r.KeyCheck(context.Background(), 100)
		if err != nil || looked != 12 || foreign != 4 {
			t.Fatalf("KeyCheck on a cluster: looked %d, foreign %d, %v; want 12, 4", looked, foreign, err)
		}
		if looked, _, err := b.r.KeyCheck(context.Background(), 5); err != nil || looked != 5 {
			t.Fatalf("KeyCheck of 5: looked %d, %v", looked, err)
		}
	})
	t.Run("a master down", func(t *testing.T) {
		r := openStore(t, c.URL(), store.Options{})
		if err := r.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.Masters[2].Stop()
		if err := r.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("a master stopped: %v", err)
		}
	})
}

// moveSlot moves key's slot, and the keys in it, from one master to
// another as redis-cli --cluster reshard does: importing and migrating,
// MIGRATE, then the slot's new owner told to every master.
func moveSlot(t *testing.T, c *storetest.Cluster, key string, from, to *storetest.Server) {
	t.Helper()
	slot := storetest.Command(from.Addr, "CLUSTER", "KEYSLOT", key)
	fromID, toID := storetest.Command(from.Addr, "CLUSTER", "MYID"), storetest.Command(to.Addr, "CLUSTER", "MYID")
	for _, step := range []struct {
		addr string
		args []string
	}{
		{to.Addr, []string{"CLUSTER", "SETSLOT", slot, "IMPORTING", fromID}},
		{from.Addr, []string{"CLUSTER", "SETSLOT", slot, "MIGRATING", toID}},
	} {
		if got := storetest.Command(step.addr, step.args...); got != "OK" {
			t.Fatalf("%v: %q", step.args, got)
		}
	}
	host, port, _ := net.SplitHostPort(to.Addr)
	moving := strings.Fields(storetest.Command(from.Addr, "CLUSTER", "GETKEYSINSLOT", slot, "100"))
	if len(moving) == 0 {
		t.Fatalf("slot %s holds no key", slot)
	}
	if got := storetest.Command(from.Addr, append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, moving...)...); got != "OK" {
		t.Fatalf("MIGRATE %q: %q", moving, got)
	}
	for _, m := range c.Masters {
		if got := storetest.Command(m.Addr, "CLUSTER", "SETSLOT", slot, "NODE", toID); got != "OK" {
			t.Fatalf("SETSLOT NODE on %s: %q", m.Addr, got)
		}
	}
}
