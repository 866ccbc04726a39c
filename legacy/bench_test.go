package legacy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkCertificateLogin measures certificate login end to end against
// the in-process emulator on SoftHSM RSA-2048 (Authenticate, the token's
// C_Decrypt of the challenge, AuthenticateConfirm), and in the same run,
// each alone: one decryption on the token and one loopback round trip to
// the emulator (a request it refuses at once). It reports the medians and
// login / (decrypt + 2 round trips) (target: within 15%, so at most 1.15).
func BenchmarkCertificateLogin(b *testing.B) {
	bd := newBed(b, nil)
	ctx := context.Background()
	cert := bd.key.Certificate()
	block, err := rsa.EncryptPKCS1v15(rand.Reader, cert.PublicKey.(*rsa.PublicKey), make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{}
	roundTrip := func() {
		resp, err := hc.Post(bd.emu.URL()+"/V3/Authenticate?type=certificate", "application/octet-stream", bytes.NewReader(cert.Raw))
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) // read to the end, so the connection is reused as the client's is
		resp.Body.Close()
	}
	var login, decrypt, trip []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := bd.client.Certificate(ctx, cert, bd.key); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := bd.key.DecryptContext(ctx, block, nil); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		roundTrip()
		t3 := time.Now()
		login, decrypt, trip = append(login, t1.Sub(t0)), append(decrypt, t2.Sub(t1)), append(trip, t3.Sub(t2))
	}
	ml, md, mt := median(login), median(decrypt), median(trip)
	b.ReportMetric(float64(ml.Microseconds()), "login-µs")
	b.ReportMetric(float64(md.Microseconds()), "decrypt-µs")
	b.ReportMetric(float64(mt.Microseconds()), "roundtrip-µs")
	b.ReportMetric(float64(ml)/float64(md+2*mt), "login/parts")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
