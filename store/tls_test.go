package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// TestRedisTLS: rediss:// reaches a redis-server that speaks TLS alone,
// trusting the CA of --store-ca-file; without it (the system's CAs) the
// server's certificate is refused, and the store is unavailable.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	x := storetest.NewTLS(t)
	srv := storetest.StartTLS(t, x.Cert, x.Key)
	url := "rediss://" + srv.Addr
	r := openStore(t, url, store.Options{CAFile: x.CA, Timeout: time.Second})
	if err := r.Ping(context.Background()); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	untrusted := openStore(t, url, store.Options{Timeout: time.Second})
	if err := untrusted.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("without the CA: %v", err)
	}
	plain := openStore(t, "redis://"+srv.Addr, store.Options{Timeout: time.Second})
	if err := plain.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("plain to a TLS port: %v", err)
	}
	if _, err := store.Open("redis://"+srv.Addr, store.Options{CAFile: x.CA, Sealer: mustSealer(t)}); err == nil ||
		!strings.Contains(err.Error(), "for rediss://") {
		t.Fatalf("a CA file for plain redis://: %v", err)
	}
}

// TestRedisTLSSentinelAndCluster: rediss+sentinel:// and rediss+cluster://
// reach a Sentinel set and a Redis Cluster whose every node (sentinels,
// master, replica, each cluster master) speaks TLS alone: records are
// written and read through them, every cluster master holding some. The
// plain schemes reach none of it; without the CA nothing is trusted.
func TestRedisTLSSentinelAndCluster(t *testing.T) {
	t.Parallel()
	x := storetest.NewTLS(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		url    func(t *testing.T) (tlsURL, plainURL string, masters []*storetest.Server)
		owners bool
	}{
		{"sentinel", func(t *testing.T) (string, string, []*storetest.Server) {
			set := storetest.StartSentinelTLS(t, x)
			return set.URL(), strings.Replace(set.URL(), "rediss+", "redis+", 1), []*storetest.Server{set.Master}
		}, false},
		{"cluster", func(t *testing.T) (string, string, []*storetest.Server) {
			c := storetest.StartClusterTLS(t, 3, x)
			return c.URL(), strings.Replace(c.URL(), "rediss+", "redis+", 1), c.Masters
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, plainURL, masters := tc.url(t)
			if !strings.HasPrefix(url, "rediss+") {
				t.Fatalf("the rig's URL %s", url)
			}
			r := openStore(t, url, store.Options{CAFile: x.CA, Timeout: 2 * time.Second})
			if err := r.Ping(ctx); err != nil {
				t.Fatalf("with the CA: %v", err)
			}
			for i := range 24 {
				id := fmt.Sprintf("crm-%d", i)
				l, err := r.Acquire(ctx, "oidc", id)
				if err != nil {
					t.Fatal(err)
				}
				err = r.Put(ctx, "oidc", id, []byte("record of "+id), 0, l)
				l.Release()
				if err != nil {
					t.Fatalf("put %s: %v", id, err)
				}
				if v, err := r.Get(ctx, "oidc", id); err != nil || string(v) != "record of "+id {
					t.Fatalf("get %s: %q %v", id, v, err)
				}
			}
			for _, m := range masters {
				if n := m.Command("DBSIZE"); n == "" || n == "0" {
					t.Errorf("master %s holds %q keys: not every data node was written over TLS", m.Addr, n)
				}
			}
			untrusted := openStore(t, url, store.Options{Timeout: time.Second})
			if err := untrusted.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("without the CA: %v", err)
			}
			plain := openStore(t, plainURL, store.Options{Timeout: time.Second})
			if err := plain.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("%s to TLS ports: %v", plainURL, err)
			}
		})
	}
}

// TestStorePasswordInClear: a store password is not sent over plain TCP
// beyond loopback, unless Insecure (--store-insecure) says so; over TLS,
// or to loopback, it is.
func TestStorePasswordInClear(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url      string
		password string
		insecure bool
		refused  bool
	}{
		{"redis://10.0.0.5:6379", "pw", false, true},
		{"redis://redis.example:6379/1", "pw", false, true},
		{"redis+sentinel://127.0.0.1:26379,10.0.0.6:26379/mymaster", "pw", false, true},
		{"redis+cluster://10.0.0.5:6379,10.0.0.6:6379", "pw", false, true},
		{"redis://10.0.0.5:6379", "pw", true, false},
		{"redis://10.0.0.5:6379", "", false, false},
		{"redis://127.0.0.1:6379", "pw", false, false},
		{"redis://localhost:6379", "pw", false, false},
		{"redis://[::1]:6379", "pw", false, false},
		{"rediss://10.0.0.5:6379", "pw", false, false},
		{"rediss+sentinel://10.0.0.5:26379/mymaster", "pw", false, false},
		{"rediss+cluster://10.0.0.5:6379,10.0.0.6:6379", "pw", false, false},
	} {
		r, err := store.Open(tc.url, store.Options{Password: tc.password, Insecure: tc.insecure, Sealer: mustSealer(t)})
		if r != nil {
			r.Close()
		}
		if got := err != nil; got != tc.refused {
			t.Errorf("%s (password %v, insecure %v): %v", tc.url, tc.password != "", tc.insecure, err)
			continue
		}
		if tc.refused && (!errors.Is(err, store.ErrBadURL) || !strings.Contains(err.Error(), "would cross the network in clear to ") ||
			!strings.Contains(err.Error(), "--store-insecure") || strings.Contains(err.Error(), tc.password+"@")) {
			t.Errorf("%s: %v", tc.url, err)
		}
	}
}

func mustSealer(t *testing.T) *store.Sealer {
	s, err := store.NewSealer(key(1))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
