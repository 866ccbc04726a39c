package pkcs11_test

import (
	"context"
	"crypto"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/hsmtest"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/signer"
)

// benchSetup opens the RSA-2048 key of a fresh SoftHSM token and returns it,
// a CMS signer over it, a signed text with its timestamp and its digest.
func benchSetup(b *testing.B) (*pkcs11.Key, *signer.CMS, []byte, []byte, time.Time) {
	tk := hsmtest.New(b)
	key := tk.Open(b, tk.RSA.Label)
	ts := canonical.Now()
	text := canonical.Text("0F6C2E5B-9D4A-4C1E-8A2B-7E3D1F0A9B8C", canonical.Credential{Kind: canonical.Phone, Value: "9161234567"}, ts)
	digest := sha256.Sum256(text)
	return key, &signer.CMS{Key: key, Cert: key.Certificate()}, text, digest[:], ts
}

// BenchmarkToken measures, on one SoftHSM RSA-2048 key in one run, the raw
// token signature (the ceiling) and the full detached CMS signature built on
// it, each with one goroutine and with GOMAXPROCS goroutines. Compare the
// sig/s figures: CMS should stay within 10% of raw.
func BenchmarkToken(b *testing.B) {
	key, cms, text, digest, ts := benchSetup(b)

	raw := func() error { _, err := key.Sign(nil, digest, crypto.SHA256); return err }
	full := func() error { _, err := cms.SignText(context.Background(), text, ts); return err }
	for _, c := range []struct {
		name string
		op   func() error
	}{{"raw", raw}, {"cms", full}} {
		b.Run(c.name+"/serial", func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				if err := c.op(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sig/s")
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sig/s")
		})
	}
}

// BenchmarkTokenPaired alternates a raw token signature, a full CMS
// signature, and a full CMS signature bounded by a deadline (as the CLI and
// the agent sign) in one loop, so that all three see the same machine load,
// and reports each rate and the CMS rates as a percentage of raw.
func BenchmarkTokenPaired(b *testing.B) {
	key, cms, text, digest, ts := benchSetup(b)
	deadline, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var rawTime, cmsTime, deadlineTime time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := key.Sign(nil, digest, crypto.SHA256); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := cms.SignText(context.Background(), text, ts); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := cms.SignText(deadline, text, ts); err != nil {
			b.Fatal(err)
		}
		rawTime += t1.Sub(t0)
		cmsTime += t2.Sub(t1)
		deadlineTime += time.Since(t2)
	}
	b.ReportMetric(float64(b.N)/rawTime.Seconds(), "raw-sig/s")
	b.ReportMetric(float64(b.N)/cmsTime.Seconds(), "cms-sig/s")
	b.ReportMetric(100*rawTime.Seconds()/cmsTime.Seconds(), "cms/raw-%")
	b.ReportMetric(100*rawTime.Seconds()/deadlineTime.Seconds(), "cms-deadline/raw-%")
}
