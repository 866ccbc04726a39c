package oidc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/store/storetest"
)

// TestFiguresSharedRefreshLoad: three agents (three token caches, each
// with its own connection) on one redis-server serve 50 profiles whose
// access tokens live 2 s, with one-time refresh tokens, under load from
// eight callers for 12 s (SIGNAGENT_FIGURES_DURATION to change it): no
// refresh token is presented twice (the provider would revoke the grant),
// no profile is signed out, and the refreshes come at most 1.2 times as
// often as the tokens expire.
func TestFiguresSharedRefreshLoad(t *testing.T) {
	t.Parallel()
	const profiles, ttl = 50, 2 * time.Second
	duration := 12 * time.Second
	if d, err := time.ParseDuration(os.Getenv("SIGNAGENT_FIGURES_DURATION")); err == nil {
		duration = d
	}
	b := newBed(t, func(o *emulator.OIDCConfig) {
		o.RefreshRotation = "one-time"
		o.AccessTokenTTL = emulator.Duration(ttl)
	})
	c := b.client(t, nil)
	srv := storetest.Start(t)
	login := sharedRecords(t, srv.URL(), 9)
	var wg sync.WaitGroup
	for i := range profiles {
		wg.Go(func() {
			rec, err := deviceSignIn(t.Context(), b, c)
			if err == nil {
				rec.Profile = fmt.Sprintf("p%d", i)
				err = login.Save(rec)
			}
			if err != nil {
				t.Errorf("profile p%d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow() // the load below would only count the profiles missing
	}
	agents := make([]*Tokens, 3)
	for i := range agents {
		agents[i] = &Tokens{Store: sharedRecords(t, srv.URL(), 9), Client: func(*Record) (*Client, error) { return c, nil }}
	}
	before := b.s.Stats()
	stop := time.Now().Add(duration)
	start := time.Now()
	var calls, signedOut, failed atomic.Int64
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				p := fmt.Sprintf("p%d", rand.IntN(profiles))
				_, _, err := agents[rand.IntN(len(agents))].Token(context.Background(), p)
				calls.Add(1)
				switch {
				case errors.Is(err, ErrSignIn):
					signedOut.Add(1)
				case err != nil:
					failed.Add(1)
				}
				time.Sleep(time.Millisecond) // a busy partner system, not a spin: other tests run beside this one
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	after := b.s.Stats()
	refreshes := after.Refreshes - before.Refreshes
	ratio := float64(refreshes) / (float64(profiles) * elapsed.Seconds() / ttl.Seconds())
	t.Logf("3 agents, %d profiles, %v tokens, %v: %d calls, %d refreshes (%.2fx elapsed/lifetime per profile), %d reused refresh tokens, %d signed out, %d other errors",
		profiles, ttl, elapsed.Round(time.Millisecond), calls.Load(), refreshes, ratio, after.RefreshReuses, signedOut.Load(), failed.Load())
	if after.RefreshReuses != 0 || signedOut.Load() != 0 || failed.Load() != 0 || ratio > 1.2 {
		t.Fatalf("reused %d, signed out %d, errors %d, refresh ratio %.2f (want 0, 0, 0, at most 1.2)", after.RefreshReuses, signedOut.Load(), failed.Load(), ratio)
	}
}
