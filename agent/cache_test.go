package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/trusted"
)

// TestCacheSweepsExpired: sessions of users who never come back do not stay
// in memory; live ones do.
func TestCacheSweepsExpired(t *testing.T) {
	c := newSessionCache(time.Hour)
	now := time.Now()
	c.now = func() time.Time { return now }
	add := func(i int) {
		k := sessionKey{canonical.Phone, fmt.Sprintf("%010d", i), "u"}
		_, _, err := c.obtain(context.Background(), k, false, 0, time.Second, func(context.Context) (*trusted.Session, error) {
			return &trusted.Session{Sid: "s", ObtainedAt: now}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range minSweep - 1 {
		add(i)
	}
	now = now.Add(2 * time.Hour) // all of them expire
	for i := minSweep; i < minSweep+10; i++ {
		add(i)
	}
	if n := len(c.entries); n != 10 {
		t.Fatalf("%d entries after the sweep, want the 10 live ones", n)
	}
	if _, ok := c.get(sessionKey{canonical.Phone, fmt.Sprintf("%010d", minSweep), "u"}); !ok {
		t.Fatal("a live session was swept")
	}
}
