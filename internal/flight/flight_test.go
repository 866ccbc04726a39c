package flight

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Callers that overlap share one flow; one of them gets its source, the
// others FromMemory; an error reaches them all; a caller whose context
// ends stops waiting without ending the flow for the others.
func TestDo(t *testing.T) {
	var g Group[int]
	release := make(chan struct{})
	runs := 0
	var wg sync.WaitGroup
	froms := make(chan string, 5)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, from, err := g.Do(context.Background(), "k", func() (int, string, error) {
				runs++
				<-release
				return 7, "login", nil
			})
			if err != nil || v != 7 {
				t.Errorf("%d %v", v, err)
			}
			froms <- from
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	time.Sleep(20 * time.Millisecond) // the five are waiting on the flow
	if _, _, err := g.Do(ctx, "k", func() (int, string, error) { return 0, "", nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a caller past its deadline: %v", err)
	}
	close(release)
	wg.Wait()
	close(froms)
	logins := 0
	for f := range froms {
		if f == "login" {
			logins++
		} else if f != FromMemory {
			t.Errorf("source %q", f)
		}
	}
	if runs != 1 || logins != 1 {
		t.Fatalf("%d flows, %d callers told login; want 1 and 1", runs, logins)
	}
	boom := errors.New("refused")
	if _, _, err := g.Do(context.Background(), "k", func() (int, string, error) { return 0, "", boom }); !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
}
