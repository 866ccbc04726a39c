package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestClearPasswordDialer: with a store password over plain TCP, the
// nodes learnt from the store (Sentinel's master, a cluster's map) are
// checked as they are dialed: one beyond loopback is not dialed at all.
func TestClearPasswordDialer(t *testing.T) {
	uo, err := redisOptions("redis+sentinel://127.0.0.1:26379/mymaster", Options{Password: "pw"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if uo.Dialer == nil {
		t.Fatal("no dialer checks the nodes Sentinel names")
	}
	if _, err := uo.Dialer(context.Background(), "tcp", "10.0.0.7:6379"); err == nil || !strings.Contains(err.Error(), "would cross the network in clear to 10.0.0.7:6379") {
		t.Fatalf("a master beyond loopback: %v", err)
	}
	if c, err := uo.Dialer(context.Background(), "tcp", "127.0.0.1:1"); err == nil || strings.Contains(err.Error(), "in clear") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a master on loopback is dialed: %v", err)
	}
	for _, o := range []Options{{Password: "pw", Insecure: true}, {}} {
		uo, err := redisOptions("redis+sentinel://127.0.0.1:26379/mymaster", o, time.Second)
		if err != nil || uo.Dialer != nil {
			t.Fatalf("%+v: the dialer is go-redis's own (%v)", o, err)
		}
	}
}
