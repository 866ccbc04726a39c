package pkcs11_test

import (
	"context"
	"crypto"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer"
)

// benchSetup opens the RSA-2048 key of a fresh SoftHSM token and returns it,
// a CMS signer over it, a signed text with its timestamp and its digest.
func benchSetup(b *testing.B) (*pkcs11.Key, *signer.CMS, []byte, []byte, time.Time) {
	tk := pkcs11test.New(b)
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

// rawSigner signs with miekg/pkcs11 alone, on its own session: the ceiling
// the layer is measured against.
type rawSigner struct {
	ctx *p11.Ctx
	sh  p11.SessionHandle
	h   p11.ObjectHandle
}

func newRawSigner(b *testing.B, tk *pkcs11test.Token) *rawSigner {
	ctx, release, err := pkcs11.ProvisioningContext(tk.Module)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(release)
	slots, _ := ctx.GetSlotList(true)
	for _, s := range slots {
		ti, err := ctx.GetTokenInfo(s)
		if err != nil || strings.TrimRight(ti.Label, " ") != tk.Label {
			continue
		}
		sh, err := ctx.OpenSession(s, p11.CKF_SERIAL_SESSION)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ctx.CloseSession(sh) })
		if err := ctx.Login(sh, p11.CKU_USER, tk.PIN); err != nil && !errors.Is(err, p11.Error(p11.CKR_USER_ALREADY_LOGGED_IN)) {
			b.Fatal(err)
		}
		ctx.FindObjectsInit(sh, []*p11.Attribute{p11.NewAttribute(p11.CKA_CLASS, p11.CKO_PRIVATE_KEY), p11.NewAttribute(p11.CKA_LABEL, "rsa")})
		hs, _, err := ctx.FindObjects(sh, 2)
		ctx.FindObjectsFinal(sh)
		if err != nil || len(hs) != 1 {
			b.Fatalf("raw key lookup: %v %v", hs, err)
		}
		return &rawSigner{ctx, sh, hs[0]}
	}
	b.Fatal("token not found")
	return nil
}

var sha256Prefix = []byte{0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20}

func (r *rawSigner) sign(digest []byte) error {
	if err := r.ctx.SignInit(r.sh, []*p11.Mechanism{p11.NewMechanism(p11.CKM_RSA_PKCS, nil)}, r.h); err != nil {
		return err
	}
	_, err := r.ctx.Sign(r.sh, append(append([]byte{}, sha256Prefix...), digest...))
	return err
}

// BenchmarkLayerVsRaw alternates, in each of 1 and 2 goroutines, a raw
// C_SignInit+C_Sign on a session of its own and a signature through
// pkcs11.Key (session pool, deadline, error sorting), on one SoftHSM
// RSA-2048 key, so both see the same load; it reports each rate and the
// layer's as a percentage of raw (target: at least 97%).
func BenchmarkLayerVsRaw(b *testing.B) {
	tk := pkcs11test.New(b)
	key := tk.Open(b, "rsa")
	d := sha256.Sum256([]byte("text"))
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			raws := make([]*rawSigner, n)
			for i := range raws {
				raws[i] = newRawSigner(b, tk)
			}
			var rawNs, layerNs, ops atomic.Int64
			var next atomic.Int64
			b.SetParallelism(1)
			prev := runtime.GOMAXPROCS(n)
			defer runtime.GOMAXPROCS(prev)
			b.RunParallel(func(pb *testing.PB) {
				raw := raws[next.Add(1)-1]
				for pb.Next() {
					t0 := time.Now()
					if err := raw.sign(d[:]); err != nil {
						b.Error(err)
						return
					}
					t1 := time.Now()
					if _, err := key.Sign(nil, d[:], crypto.SHA256); err != nil {
						b.Error(err)
						return
					}
					rawNs.Add(int64(t1.Sub(t0)))
					layerNs.Add(int64(time.Since(t1)))
					ops.Add(1)
				}
			})
			perG := float64(ops.Load()) / float64(n)
			b.ReportMetric(perG*float64(n)/(time.Duration(rawNs.Load()).Seconds()/float64(n)), "raw-sig/s")
			b.ReportMetric(perG*float64(n)/(time.Duration(layerNs.Load()).Seconds()/float64(n)), "layer-sig/s")
			b.ReportMetric(100*float64(rawNs.Load())/float64(layerNs.Load()), "layer/raw-%")
		})
	}
}

// BenchmarkOpen alternates what opening a key costs at the least (load the
// module, C_Initialize, open a session, C_Login, then C_Finalize and unload)
// with pkcs11.Open and Close (which also find the key, its public half and
// its certificate), and reports Open as a multiple of the least (target:
// under 1.2x).
func BenchmarkOpen(b *testing.B) {
	tk := pkcs11test.New(b)
	var least, open time.Duration
	ctx := context.Background()
	for b.Loop() {
		t0 := time.Now()
		c := p11.New(tk.Module)
		if err := c.Initialize(); err != nil {
			b.Fatal(err)
		}
		slots, _ := c.GetSlotList(true)
		var sh p11.SessionHandle
		for _, s := range slots {
			if ti, err := c.GetTokenInfo(s); err == nil && strings.TrimRight(ti.Label, " ") == tk.Label {
				sh, _ = c.OpenSession(s, p11.CKF_SERIAL_SESSION)
			}
		}
		if err := c.Login(sh, p11.CKU_USER, tk.PIN); err != nil {
			b.Fatal(err)
		}
		c.Finalize()
		c.Destroy()
		t1 := time.Now()
		k, err := pkcs11.Open(ctx, tk.Selection("rsa"), zerolog.Nop())
		if err != nil {
			b.Fatal(err)
		}
		k.Close()
		least += t1.Sub(t0)
		open += time.Since(t1)
	}
	b.ReportMetric(float64(least.Microseconds())/float64(b.N), "least-µs/op")
	b.ReportMetric(float64(open.Microseconds())/float64(b.N), "open-µs/op")
	b.ReportMetric(float64(open)/float64(least), "open/least-x")
}
