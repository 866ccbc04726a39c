package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/bench"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
)

// BenchmarkProxyBodiesRSS: 64 callers each post a 16 MiB body through the
// real agent's proxy to a business API that answers after two seconds;
// the agent's peak resident memory is reported (sampled every 20ms), with
// how many calls were answered 200 and how many 503 busy. Run with
// -benchtime 1x. Before the budget the agent held every body in memory
// (1.7-2.0 GiB here); now at most --service-body-budget is held, and bodies
// over 256 KiB are spooled to unlinked files, not memory.
func BenchmarkProxyBodiesRSS(b *testing.B) {
	for b.Loop() {
		peak, ok, busy := proxyBodiesRSS(b, 64, 16<<20)
		b.ReportMetric(float64(peak)/(1<<20), "MB-peak-RSS")
		b.ReportMetric(float64(ok), "answered-200")
		b.ReportMetric(float64(busy), "answered-503")
	}
}

func proxyBodiesRSS(b *testing.B, callers, size int) (peak int64, ok, busy int64) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(2 * time.Second)
		w.Write([]byte(`{"Organizations":[]}`))
	}))
	defer slow.Close()
	tk := pkcs11test.New(b)
	dir := shortDir(b)
	store := oidc.Files{Dir: filepath.Join(dir, "state")}
	now := time.Now()
	if err := store.Save(&oidc.Record{Version: 1, Profile: "default", AuthURL: "http://127.0.0.1:1", ClientID: "bench",
		Subject: "u1", Scopes: []string{"openid"}, AccessToken: "0123456789abcdef", TokenType: "Bearer",
		Expiry: now.Add(24 * time.Hour), SignedInAt: now}); err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "a.sock")
	a := startServe(b, signagent(b, append(serveEnv(tk), "SIGNAGENT_TOKEN_STORE="+store.Dir), "serve",
		"--listen", "unix:"+sock, "--audit-log", os.DevNull, "--business-url", slow.URL, "--request-deadline", "60s"), sock)
	body := bytes.Repeat([]byte("x"), size)
	var wg sync.WaitGroup
	var nok, nbusy atomic.Int64
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", "http://agent/v1/service/Upload", bytes.NewReader(body))
			req.Header.Set("Signagent-Identity", "oidc")
			resp, err := a.client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				nok.Add(1)
			case 503:
				nbusy.Add(1)
			default:
				b.Errorf("status %d", resp.StatusCode)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		if rss, err := bench.RSS(a.cmd.Process.Pid); err == nil && rss > peak {
			peak = rss
		}
		select {
		case <-done:
			if peak == 0 {
				b.Fatal(fmt.Errorf("no RSS sample"))
			}
			return peak, nok.Load(), nbusy.Load()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
