package trusted

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/signagent/signagent/canonical"
)

// TestCacheSweepsExpired: sessions of users who never come back do not stay
// in memory; live ones do.
func TestCacheSweepsExpired(t *testing.T) {
	c := NewSessions(time.Hour)
	now := time.Now()
	c.now = func() time.Time { return now }
	add := func(i int) {
		k := SessionKey{Kind: canonical.Phone, Value: fmt.Sprintf("%010d", i), ServiceUserID: "u"}
		_, _, err := c.Obtain(context.Background(), k, false, 0, time.Second, func(context.Context) (*Session, error) {
			return &Session{Sid: "s", ObtainedAt: now}, nil
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
	if _, ok := c.get(SessionKey{Kind: canonical.Phone, Value: fmt.Sprintf("%010d", minSweep), ServiceUserID: "u"}); !ok {
		t.Fatal("a live session was swept")
	}
}
