package trusted_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/trusted"
)

// timedSigner adds up the time spent signing.
type timedSigner struct {
	s     trusted.Signer
	total *atomic.Int64
}

func (t timedSigner) SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error) {
	start := time.Now()
	sig, err := t.s.SignText(ctx, text, ts)
	t.total.Add(int64(time.Since(start)))
	return sig, err
}

// BenchmarkSession runs the full flow (sign on SoftHSM RSA-2048,
// authenticate-by-truster, approve-truster) against the in-process emulator
// and reports sessions per second, the median latency and the share of the
// time spent signing.
func BenchmarkSession(b *testing.B) {
	signing := &atomic.Int64{}
	e := newBenchEnv(b, func(c *trusted.Config) {
		c.Signer = timedSigner{&signer.CMS{Key: c.Signer.(*signer.CMS).Key, Cert: c.Signer.(*signer.CMS).Cert}, signing}
	})
	ctx := context.Background()
	cred := e.linked(b)
	lat := make([]time.Duration, 0, 4096)
	signing.Store(0)
	start := time.Now()
	for b.Loop() {
		t0 := time.Now()
		if _, err := e.client.Session(ctx, cred, serviceUser); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	total := time.Since(start)
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/total.Seconds(), "sessions/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(100*float64(signing.Load())/float64(total), "signing-%")
}
