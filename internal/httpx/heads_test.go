package httpx

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx/httpxtest"
)

// rawPeer answers each request with answers[N] for the path /N.
func rawPeer(t testing.TB, ln net.Listener, answers ...string) string {
	return httpxtest.ServeOn(t, ln, func(path string) string {
		n, _ := strconv.Atoi(strings.TrimPrefix(path, "/"))
		return answers[min(n, len(answers)-1)]
	})
}

func listen(t testing.TB) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// fields is n fields "X-Hi: v" (each key its own: the costliest to hold),
// each line ended by eol.
func fields(n int, eol string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "X-H%d: v%s", i, eol)
	}
	return b.String()
}

// answer is a 200 whose head has extra (lines, each ended) and the body.
func answer(extra, body string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", extra, len(body), body)
}

// headCases are the heads, well-formed and hostile, that both net/http's
// Transport and the bounded one read. bounded is what the bounded one
// must give: "ok" (the body "hi"), "fields" or "bytes" (a *HeadError),
// or "error" (net/http's own refusal, as the Transport's).
var headCases = []struct {
	name    string
	answer  string
	bounded string
}{
	{"well-formed", answer("Content-Type: text/plain\r\n", "hi"), "ok"},
	{"exactly 100 fields", answer(fields(99, "\r\n"), "hi"), "ok"},
	{"101 fields", answer(fields(100, "\r\n"), "hi"), "fields"},
	{"101 fields, LF ends", strings.ReplaceAll(answer(fields(100, "\n"), "hi"), "\r\n", "\n"), "fields"},
	{"100,000 tiny fields", answer(fields(100000, "\r\n"), "hi"), "fields"},
	{"100,000 fields of one key", answer(strings.Repeat("a:b\r\n", 100000), "hi"), "fields"},
	{"continuation lines are their field's", answer("X-Folded: a\r\n"+strings.Repeat(" b\r\n\tc\r\n", 300)+fields(90, "\r\n"), "hi"), "ok"},
	{"a head of 64 KiB", answer("X-Big: "+strings.Repeat("a", 64<<10-len(answer("X-Big: \r\n", "")))+"\r\n", "hi"), "ok"},
	{"a head of 64 KiB and a byte", answer("X-Big: "+strings.Repeat("a", 64<<10+1-len(answer("X-Big: \r\n", "")))+"\r\n", "hi"), "bytes"},
	{"a head of 65 KiB", answer("X-Big: "+strings.Repeat("a", 65<<10)+"\r\n", "hi"), "bytes"},
	{"interim answers, each within", "HTTP/1.1 103 Early Hints\r\n" + fields(90, "\r\n") + "\r\nHTTP/1.1 100 Continue\r\n\r\n" + answer(fields(90, "\r\n"), "hi"), "ok"},
	{"interim and final heads of 40 KiB each (the bytes of all heads count)", "HTTP/1.1 103 Early Hints\r\nX-Big: " + strings.Repeat("a", 40<<10) + "\r\n\r\n" + answer("X-Big: "+strings.Repeat("a", 40<<10)+"\r\n", "hi"), "bytes"},
	{"an interim answer of 101 fields", "HTTP/1.1 103 Early Hints\r\n" + fields(101, "\r\n") + "\r\n" + answer("", "hi"), "fields"},
	{"a final answer of 101 fields after an interim one", "HTTP/1.1 100 Continue\r\n\r\n" + answer(fields(100, "\r\n"), "hi"), "fields"},
	{"a status with spaces before the code", "HTTP/1.1   103 Early Hints\r\n\r\n" + answer(fields(100, "\r\n"), "hi"), "fields"},
	{"a CR-only line is a field", answer("A: b\r\n\r\r\n", "hi"), "error"},
	{"a body of lines that starts as a head", answer("", "HTTP/1.1 200 OK\r\n"+fields(500, "\r\n")+"\r\n"), "ok"},
	{"a head with no status code", "HTTP/1.1\r\n" + fields(101, "\r\n") + "\r\n", "fields"},
	{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", "error"},
}

// outcome is what a client got: "ok" (a 200 with the body "hi"), "fields"
// or "bytes" (a *HeadError), or "error" (any other error).
func outcome(resp *http.Response, err error) string {
	var he *HeadError
	switch {
	case errors.As(err, &he) && he.Fields != 0:
		return "fields"
	case errors.As(err, &he):
		return "bytes"
	case err != nil:
		return "error"
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || (string(body) != "hi" && !strings.HasPrefix(string(body), "HTTP/1.1 200 OK")) {
		return fmt.Sprintf("status %d %.20q %v", resp.StatusCode, body, err)
	}
	return "ok"
}

// TestBoundedHeadsAgainstTransport: the same heads through net/http's
// Transport and through the bounded one (Transport(HeadLimits{})): the
// bounded one refuses every head net/http refuses, refuses a head past
// either bound with a *HeadError, and reads every other as net/http does.
// Each head is sent on a new connection and on one kept from a
// well-formed answer before (the counter is armed by the next request).
func TestBoundedHeadsAgainstTransport(t *testing.T) {
	for _, tc := range headCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, kept := range []bool{false, true} {
				answers := []string{tc.answer}
				if kept {
					answers = []string{answer("", "hi"), tc.answer}
				}
				addr := rawPeer(t, listen(t), answers...)
				got := map[string]string{}
				for name, rt := range map[string]http.RoundTripper{
					"net/http": &http.Transport{MaxResponseHeaderBytes: 16 << 20},
					"bounded":  Transport(HeadLimits{}),
				} {
					c := &http.Client{Transport: rt, Timeout: 10 * time.Second}
					path := "/0"
					if kept {
						if o := outcome(c.Get("http://" + addr + "/0")); o != "ok" {
							t.Fatalf("%s, the first answer: %s", name, o)
						}
						path = "/1"
					}
					got[name] = outcome(c.Get("http://" + addr + path))
					c.CloseIdleConnections()
				}
				if got["bounded"] != tc.bounded {
					t.Errorf("kept %v: the bounded Transport gave %s, want %s (net/http: %s)", kept, got["bounded"], tc.bounded, got["net/http"])
				}
				if got["net/http"] != "ok" && got["bounded"] == "ok" {
					t.Errorf("kept %v: net/http refused (%s), the bounded one did not", kept, got["net/http"])
				}
			}
		})
	}
}

// A head that trickles in a byte at a time is counted the same, and
// refused at once.
func TestBoundedHeadTrickling(t *testing.T) {
	ln := listen(t)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		http.ReadRequest(bufio.NewReader(c))
		for _, b := range []byte(answer(fields(101, "\r\n"), "hi")) {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
		}
		io.Copy(io.Discard, c)
	}()
	defer ln.Close()
	if o := outcome((&http.Client{Transport: Transport(HeadLimits{}), Timeout: 5 * time.Second}).Get("http://" + ln.Addr().String() + "/")); o != "fields" {
		t.Fatal(o)
	}
}

// Over TLS the counter reads the plain bytes (the bounded Transport does
// the handshake itself): HTTP/1.1 heads are counted as they come; an
// HTTP/2 peer is still spoken to in HTTP/2, and its heads' fields are
// counted once parsed.
func TestBoundedHeadsOverTLS(t *testing.T) {
	cert := httptest.NewTLSServer(http.NotFoundHandler())
	pool := cert.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	certs := cert.TLS.Certificates
	cert.Close()
	bounded := func() *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"}, ForceAttemptHTTP2: true}
		return &http.Client{Transport: BoundHeads(tr, HeadLimits{}), Timeout: 10 * time.Second}
	}
	t.Run("HTTP/1.1", func(t *testing.T) {
		ln := tls.NewListener(listen(t), &tls.Config{Certificates: certs})
		addr := rawPeer(t, ln, answer("", "hi"), answer(fields(100000, "\r\n"), "hi"), answer("X-Big: "+strings.Repeat("a", 65<<10)+"\r\n", "hi"))
		c := bounded()
		resp, err := c.Get("https://" + addr + "/0")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.TLS == nil || resp.TLS.ServerName != "example.com" || !resp.TLS.HandshakeComplete {
			t.Fatalf("the answer's TLS state: %+v", resp.TLS)
		}
		for i, want := range []string{"ok", "fields", "bytes", "ok"} {
			if o := outcome(c.Get(fmt.Sprintf("https://%s/%d", addr, i%3))); o != want {
				t.Fatalf("got %s, want %s", o, want)
			}
		}
	})
	t.Run("HTTP/2", func(t *testing.T) {
		n := 50
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor != 2 {
				http.Error(w, "not HTTP/2", 500)
				return
			}
			for i := range n {
				w.Header().Set(fmt.Sprintf("X-H%d", i), "v")
			}
			io.WriteString(w, "hi")
		}))
		s.EnableHTTP2 = true
		s.TLS = &tls.Config{Certificates: certs}
		s.StartTLS()
		defer s.Close()
		c := bounded()
		if o := outcome(c.Get(s.URL)); o != "ok" {
			t.Fatalf("50 fields over HTTP/2: %s", o)
		}
		n = 150
		if o := outcome(c.Get(s.URL)); o != "fields" {
			t.Fatalf("150 fields over HTTP/2: %s", o)
		}
	})
}

// The errors say what passed which bound, in one line, with their kind.
func TestHeadErrorText(t *testing.T) {
	for _, tc := range []struct {
		err  *HeadError
		want string
	}{
		{&HeadError{Fields: 100}, "a head of more than 100 header fields, more than signagent reads"},
		{&HeadError{Bytes: 64 << 10, Setting: "--service-max-header-bytes"}, "a head larger than 64 KiB, past --service-max-header-bytes"},
	} {
		if tc.err.Error() != tc.want || !errors.Is(tc.err, errdefs.ErrUnreachable) {
			t.Errorf("%q, want %q", tc.err.Error(), tc.want)
		}
	}
	te := &TransportError{Step: "token", URL: "https://idp.example/token", Err: &HeadError{Fields: 100}}
	if want := "token: https://idp.example/token answered a head of more than 100 header fields, more than signagent reads"; te.Error() != want {
		t.Errorf("%q, want %q", te.Error(), want)
	}
}

// The counter allocates nothing, whatever it reads.
func TestHeadCounterAllocates(t *testing.T) {
	head := []byte(answer(fields(50, "\r\n"), "hi"))
	c := NewHeadCounter(HeadLimits{Fields: 100, Bytes: 64 << 10})
	if n := testing.AllocsPerRun(100, func() {
		c.Arm()
		if _, err := c.Scan(head); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per head", n)
	}
}

// BenchmarkHeadCounter: what counting costs a typical answer head (a
// dozen fields, 400 bytes), read in one chunk as the proxy reads it.
func BenchmarkHeadCounter(b *testing.B) {
	head := []byte(answer("Content-Type: application/json; charset=utf-8\r\nDate: Mon, 30 Nov 2026 10:00:00 GMT\r\n"+
		"Cache-Control: no-store\r\nX-Request-Id: 3f2a0c1e-5b7d-4e8f-9a01-23456789abcd\r\n"+fields(8, "\r\n"), `{"Organizations":[]}`))
	c := NewHeadCounter(HeadLimits{Fields: DefaultHeadFields})
	b.SetBytes(int64(len(head)))
	for b.Loop() {
		c.Arm()
		if _, err := c.Scan(head); err != nil {
			b.Fatal(err)
		}
	}
}

// An upload the service answers early: the request's body is still being
// written when the answer's head has been read, and the answer's body
// (here lines that read as a head of 101 fields) is not a head: the
// counter is armed once per request, not by every write.
func TestBoundedHeadEarlyAnswerToUpload(t *testing.T) {
	ln := listen(t)
	defer ln.Close()
	chunk1, chunk2 := strings.Repeat("a", 100), strings.Repeat("b", 8<<10)
	body := "HTTP/1.1 200 OK\r\n" + fields(101, "\r\n") + "\r\n"
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		if _, err := io.ReadFull(req.Body, make([]byte, len(chunk1))); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body))
		// The body goes once the client has written the rest of its own.
		if _, err := io.ReadFull(req.Body, make([]byte, len(chunk2))); err != nil {
			return
		}
		io.WriteString(c, body)
		io.Copy(io.Discard, req.Body)
	}()
	pr, pw := io.Pipe()
	go io.WriteString(pw, chunk1)
	c := &http.Client{Transport: Transport(HeadLimits{}), Timeout: 10 * time.Second}
	resp, err := c.Post("http://"+ln.Addr().String()+"/", "text/plain", pr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.WriteString(pw, chunk2); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	pw.Close()
	if err != nil || string(got) != body {
		t.Fatalf("the answer's body: %v, %.40q", err, got)
	}
}

// BenchmarkBoundedRoundTrip: what the bounded Transport costs a request on
// a kept connection (allocs/op against net/http's own Transport).
func BenchmarkBoundedRoundTrip(b *testing.B) {
	addr := rawPeer(b, listen(b), answer("Content-Type: text/plain\r\n"+fields(10, "\r\n"), "hi"))
	for _, bc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"net-http", &http.Transport{}},
		{"bounded", Transport(HeadLimits{})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req, _ := http.NewRequest("GET", "http://"+addr+"/0", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := bc.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
