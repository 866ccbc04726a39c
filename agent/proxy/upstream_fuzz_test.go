package proxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/signagent/signagent/internal/httpx"
)

// FuzzUpstream: whatever a business API writes for one caller, and
// whatever it writes after that on the idle connection, the next caller
// gets the answer written for it or an error, never those bytes, and no
// pooled connection holds bytes nobody read. The corpus is in
// testdata/fuzz/FuzzUpstream; make test runs the target for a few
// seconds.
func FuzzUpstream(f *testing.F) {
	for _, seed := range [][2]string{
		{answerFor("first"), ""},
		{answerFor("first"), answerFor("intruder")},
		{answerFor("first") + answerFor("intruder"), ""},
		{"HTTP/1.1 204 No Content\r\nContent-Length: 30\r\n\r\n", answerFor("intruder")},
		{"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", "0\r\n\r\n"},
		{"HTTP/1.1 100 Continue\r\n\r\n" + chunkedFor("first") + "garbage", ""},
		{"HTTP/1.0 200 OK\r\n\r\nfor first", ""},
		{"HTTP/1.1 101 Switching Protocols\r\n\r\n", answerFor("intruder")},
		{"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n", answerFor("intruder")},
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nfor\r\n0\r\n\r\n", "HTTP/1.1 200"},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 9\r\n\r\nfor first", ""},
	} {
		f.Add([]byte(seed[0]), []byte(seed[1]))
	}
	f.Fuzz(func(t *testing.T, answer, late []byte) {
		// The second caller's answer carries a value the input cannot
		// know, so that bytes of the input dressed as its answer are told
		// from its answer.
		second := fmt.Sprintf("second-%x", rand.Uint64())
		lateCh, wrote := make(chan struct{}), make(chan struct{})
		api := startRawAPI(t, func(c net.Conn, who string, _ int) bool {
			if who != "first" {
				io.WriteString(c, answerFor(who))
				return true
			}
			c.Write(answer)
			<-lateCh
			c.Write(late)
			close(wrote)
			return true
		})
		base, _ := url.Parse(api.url())
		u := newUpstream(base, httpx.HeadLimits{}, nil)
		u.headerTimeout = 100 * time.Millisecond
		defer u.CloseIdleConnections()

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", api.url()+"/", nil)
		req.Header.Set("X-Who", "first")
		if resp, err := u.RoundTrip(req); err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<20))
			resp.Body.Close()
		}
		cancel()
		close(lateCh)
		select {
		case <-wrote:
			// Until the late bytes show on the pooled connection (loopback
			// delivers them at once; a loaded machine may take a moment).
			for deadline := time.Now().Add(200 * time.Millisecond); len(late) > 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				u.mu.Lock()
				shown := len(u.idle) == 0 || !quiet(u.idle[len(u.idle)-1])
				u.mu.Unlock()
				if shown {
					break
				}
			}
		case <-time.After(500 * time.Millisecond): // the connection was closed before
		}
		u.mu.Lock()
		for _, c := range u.idle {
			if c.br.Buffered() > 0 {
				t.Errorf("a pooled connection holds %d bytes nobody read", c.br.Buffered())
			}
		}
		u.mu.Unlock()
		if got := call(u, api.url(), second, 2*time.Second); got != "own" && got != "error" {
			t.Fatalf("the next caller got %s", got)
		}
	})
}
