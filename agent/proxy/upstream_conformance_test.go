package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/internal/httpx"
)

// The agent's upstream client is hand-written (see upstream.go), so it is
// held to net/http's Transport: the same scripted, misbehaving business
// API, written on raw TCP, answers both, and for every behaviour the agent
// must be no less safe. Every answer the API writes names, in X-For and in
// its body, the caller it was written for (or "intruder" for bytes nobody
// asked for): a caller that reads an answer not written for it is
// cross-talk, the one thing that must never happen.

// rawAPI is a business API on raw TCP whose script writes what it likes
// on a connection.
type rawAPI struct {
	ln     net.Listener
	script func(c net.Conn, who string, n int) bool // n: the request's number on c; false closes c
	conns  atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	open   []net.Conn
	tls    bool
}

func startRawAPI(t testing.TB, script func(c net.Conn, who string, n int) bool) *rawAPI {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveRawAPI(t, ln, script)
}

func serveRawAPI(t testing.TB, ln net.Listener, script func(c net.Conn, who string, n int) bool) *rawAPI {
	a := &rawAPI{ln: ln, script: script}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.conns.Add(1)
			a.mu.Lock()
			a.open = append(a.open, c)
			a.mu.Unlock()
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if !a.script(c, req.Header.Get("X-Who"), n) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(a.close)
	return a
}

func (a *rawAPI) close() {
	a.ln.Close()
	a.mu.Lock()
	for _, c := range a.open {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

func (a *rawAPI) url() string {
	if a.tls {
		return "https://" + a.ln.Addr().String()
	}
	return "http://" + a.ln.Addr().String()
}

// answerFor is a well-framed answer written for who.
func answerFor(who string) string {
	body := "for " + who
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nX-For: %s\r\nContent-Length: %d\r\n\r\n%s", who, len(body), body)
}

func chunkedFor(who string) string {
	body := "for " + who
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nX-For: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", who, len(body), body)
}

// later writes s on c after d, unless c is closed by then.
func later(c net.Conn, d time.Duration, s string, closeAfter bool) {
	lateWrites.Add(1)
	go func() {
		defer lateWrites.Add(-1)
		time.Sleep(d)
		io.WriteString(c, s)
		if closeAfter {
			c.Close()
		}
	}()
}

// lateWrites counts the late writes not yet made, in every test of the
// package (a sequence waits for all of them; they last 100 ms at most).
var lateWrites atomic.Int64

// waitLateWrites waits until every late write has been made, so that on a
// loaded machine a write the scheduler delayed still lands before the next
// call (see settle), not after it.
func waitLateWrites(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for lateWrites.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("a late write was not made within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// settle is how long the sequence waits between calls, once every late
// write is made (waitLateWrites), so that what a behaviour writes late
// (10 ms after its answer) has reached the client before the next call.
// Bytes that arrive after a request went out on a connection
// cannot be told from its answer by any HTTP/1.1 client (the Transport
// neither), so the behaviours that write late run one caller after
// another only; those that write all at once run with four identities
// at once too.
const settle = 100 * time.Millisecond

// hugeHead is built once, on first use, so that the memory measured is
// the client's.
var hugeHead = sync.OnceValue(func() []byte {
	return []byte("HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 64<<20) + "\r\nContent-Length: 0\r\n\r\n")
})

type conformanceCase struct {
	name   string
	script func(c net.Conn, who string, n int) bool
	// concurrent also runs the case with several identities at once
	// (see settle).
	concurrent bool
	// pastBounds: heads the Transport reads whole and the agent's client
	// must refuse, every one, before it holds them (past
	// httpx.DefaultHeadFields fields or httpx.DefaultHeadBytes bytes).
	pastBounds bool
}

// manyFields is an answer for who whose head has n fields more.
func manyFields(who string, n int) string {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\nX-For: " + who + "\r\n")
	for i := range n {
		fmt.Fprintf(&b, "X-H%d: v\r\n", i)
	}
	body := "for " + who
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.String()
}

var conformanceCases = []conformanceCase{
	{name: "well-behaved", concurrent: true, script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, answerFor(who))
		return true
	}},
	{name: "unsolicited answer while idle", script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, answerFor(who))
		later(c, 10*time.Millisecond, answerFor("intruder"), false)
		return true
	}},
	{name: "408 then close while idle", script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, answerFor(who))
		later(c, 10*time.Millisecond, "HTTP/1.1 408 Request Timeout\r\nX-For: intruder\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", true)
		return true
	}},
	{name: "longer than its Content-Length, same write", concurrent: true, script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, answerFor(who)+answerFor("intruder"))
		return true
	}},
	{name: "longer than its Content-Length, rest late", script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, answerFor(who))
		later(c, 10*time.Millisecond, answerFor("intruder"), false)
		return true
	}},
	{name: "bytes after a chunked body", concurrent: true, script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, chunkedFor(who)+answerFor("intruder"))
		return true
	}},
	{name: "two interim answers", concurrent: true, script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"+answerFor(who))
		return true
	}},
	{name: "many interim answers", script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 1000)+answerFor(who))
		return true
	}},
	{name: "101 Switching Protocols", script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nX-For: "+who+"\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n"+answerFor("intruder"))
		return true
	}},
	{name: "204 with a body", concurrent: true, script: func(c net.Conn, who string, _ int) bool {
		body := answerFor("intruder")
		io.WriteString(c, fmt.Sprintf("HTTP/1.1 204 No Content\r\nX-For: %s\r\nContent-Length: %d\r\n\r\n%s", who, len(body), body))
		return true
	}},
	{name: "304 with a body", concurrent: true, script: func(c net.Conn, who string, _ int) bool {
		body := answerFor("intruder")
		io.WriteString(c, fmt.Sprintf("HTTP/1.1 304 Not Modified\r\nX-For: %s\r\nContent-Length: %d\r\n\r\n%s", who, len(body), body))
		return true
	}},
	{name: "204 with a late body", script: func(c net.Conn, who string, _ int) bool {
		body := answerFor("intruder")
		io.WriteString(c, fmt.Sprintf("HTTP/1.1 204 No Content\r\nX-For: %s\r\nContent-Length: %d\r\n\r\n", who, len(body)))
		later(c, 10*time.Millisecond, body, false)
		return true
	}},
	{name: "Content-Length with Transfer-Encoding", concurrent: true, script: func(c net.Conn, who string, _ int) bool {
		body := "for " + who
		io.WriteString(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nX-For: %s\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", who, len(body), body))
		return true
	}},
	{name: "two different Content-Lengths", script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-For: "+who+"\r\nContent-Length: 7\r\nContent-Length: 30\r\n\r\nfor "+who+answerFor("intruder"))
		return true
	}},
	{name: "close in the head", script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-For: "+who+"\r\nContent-Le")
		return false
	}},
	{name: "close in the body", script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-For: "+who+"\r\nContent-Length: 100\r\n\r\nfor "+who)
		return false
	}},
	{name: "close in a chunk", script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-For: "+who+"\r\nTransfer-Encoding: chunked\r\n\r\n40\r\nfor "+who)
		return false
	}},
	{name: "trickling head", script: func(c net.Conn, who string, _ int) bool {
		for _, b := range []byte(answerFor(who)) {
			if _, err := c.Write([]byte{b}); err != nil {
				return false
			}
			time.Sleep(20 * time.Millisecond)
		}
		return true
	}},
	{name: "huge head (64 MiB)", script: func(c net.Conn, who string, _ int) bool {
		c.Write(hugeHead())
		return false
	}},
	{name: "100 header fields", concurrent: true, script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, manyFields(who, 98)) // and X-For, Content-Length
		return true
	}},
	{name: "101 header fields", pastBounds: true, script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, manyFields(who, 99))
		return true
	}},
	{name: "ten thousand headers", pastBounds: true, script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, manyFields(who, 10000))
		return true
	}},
	{name: "100,000 tiny fields", pastBounds: true, script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-For: "+who+"\r\n"+strings.Repeat("a:\r\n", 100000)+"Content-Length: 0\r\n\r\n")
		return true
	}},
	{name: "a head of 65 KiB", pastBounds: true, script: func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-For: "+who+"\r\nX-Big: "+strings.Repeat("a", 65<<10)+"\r\nContent-Length: 0\r\n\r\n")
		return true
	}},
	{name: "HTTP/1.0 answer", concurrent: true, script: func(c net.Conn, who string, _ int) bool {
		body := "for " + who
		io.WriteString(c, fmt.Sprintf("HTTP/1.0 200 OK\r\nX-For: %s\r\nContent-Length: %d\r\n\r\n%s", who, len(body), body))
		later(c, 10*time.Millisecond, answerFor("intruder"), false)
		return true
	}},
	{name: "Connection: close", concurrent: true, script: func(c net.Conn, who string, _ int) bool {
		body := "for " + who
		io.WriteString(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nX-For: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", who, len(body), body))
		later(c, 10*time.Millisecond, answerFor("intruder"), false)
		return true
	}},
	{name: "caller gone before the body", script: func(c net.Conn, who string, _ int) bool {
		body := "for " + who
		if who == "gone" {
			io.WriteString(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nX-For: %s\r\nContent-Length: %d\r\n\r\n", who, len(body)))
			later(c, 100*time.Millisecond, body+answerFor("intruder"), false)
			return true
		}
		io.WriteString(c, answerFor(who))
		return true
	}},
}

// outcome is what one caller received: "own" (its own answer, whole),
// "status N" (an answer written for it that is not a 200 with its body),
// "error", or "CROSS-TALK: ..." when it read bytes not written for it.
func outcome(who string, resp *http.Response, err error) string {
	if err != nil {
		return "error"
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 {
		// A 101's body is the connection itself (the Transport's): not read.
		if f := resp.Header.Get("X-For"); f != who {
			return fmt.Sprintf("CROSS-TALK: %d for %q", resp.StatusCode, f)
		}
		return fmt.Sprintf("status %d", resp.StatusCode)
	}
	stop := time.AfterFunc(2*time.Second, func() { resp.Body.Close() })
	defer stop.Stop()
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if f := resp.Header.Get("X-For"); f != who {
		return fmt.Sprintf("CROSS-TALK: %d for %q", resp.StatusCode, f)
	}
	if len(body) > 0 && string(body) != "for "+who {
		return fmt.Sprintf("CROSS-TALK: body %.40q", body)
	}
	if rerr != nil {
		return fmt.Sprintf("status %d, body cut off", resp.StatusCode)
	}
	if resp.StatusCode == 200 && string(body) == "for "+who {
		return "own"
	}
	return fmt.Sprintf("status %d", resp.StatusCode)
}

// call sends one GET for who through rt and reads what comes back.
func call(rt http.RoundTripper, base, who string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/GetMyOrganizations", nil)
	req.Header.Set("X-Who", who)
	if who == "gone" {
		// The caller goes away once it has the head.
		resp, err := rt.RoundTrip(req)
		if err == nil {
			cancel()
			resp.Body.Close()
		}
		return "gone"
	}
	resp, err := rt.RoundTrip(req)
	return outcome(who, resp, err)
}

// clientsUnderTest are the two clients every behaviour runs through.
func clientsUnderTest(base string) map[string]http.RoundTripper {
	u, _ := url.Parse(base)
	up := newUpstream(u, httpx.HeadLimits{}, nil)
	up.headerTimeout = 500 * time.Millisecond
	return map[string]http.RoundTripper{
		"transport": &http.Transport{ResponseHeaderTimeout: 500 * time.Millisecond, DisableCompression: true, MaxIdleConnsPerHost: 64},
		"agent":     up,
	}
}

// pooledClean checks that no connection in the agent's pool holds bytes
// it read and nobody took.
func pooledClean(t *testing.T, rt http.RoundTripper) {
	u, ok := rt.(*upstream)
	if !ok {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range u.idle {
		if n := c.br.Buffered(); n > 0 {
			t.Errorf("a pooled connection holds %d unread bytes", n)
		}
	}
}

// runSequence makes calls one after another for identities in turn, as
// identity A then B then C would on a quiet agent.
func runSequence(t *testing.T, rt http.RoundTripper, base string) []string {
	var got []string
	for _, who := range []string{"alice", "bob", "carol", "gone", "dave", "erin"} {
		got = append(got, call(rt, base, who, 2*time.Second))
		pooledClean(t, rt)
		waitLateWrites(t)
		time.Sleep(settle)
	}
	return got
}

// runConcurrent makes calls for four identities at once.
func runConcurrent(t *testing.T, rt http.RoundTripper, base string) []string {
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	for _, who := range []string{"ann", "ben", "cat", "dan"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 8 {
				o := call(rt, base, who, 2*time.Second)
				mu.Lock()
				got = append(got, o)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	pooledClean(t, rt)
	return got
}

// summary counts outcomes: "own×5 error×1".
func summary(outcomes []string) string {
	n := map[string]int{}
	for _, o := range outcomes {
		if o != "gone" {
			n[o]++
		}
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, n[k]))
	}
	return strings.Join(parts, " ")
}

// TestUpstreamConformance runs every behaviour through the Transport and
// the agent's client and requires of the agent's: no cross-talk ever, no
// pooled connection with unread bytes, a bounded head, and for every
// behaviour where the Transport gives a caller its own answer, the same.
// go test -v prints the table (docs/testing.md has it).
func TestUpstreamConformance(t *testing.T) {
	// The Transport logs each unsolicited answer it sees on an idle
	// connection; the table is what this test reports.
	log.SetOutput(io.Discard)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	for _, tc := range conformanceCases {
		t.Run(tc.name, func(t *testing.T) {
			huge := strings.HasPrefix(tc.name, "huge head")
			if huge {
				hugeHead()
			} else {
				t.Parallel() // the memory measured is the huge head's alone
			}
			res := map[string]string{}
			for _, name := range []string{"transport", "agent"} {
				api := startRawAPI(t, tc.script)
				rt := clientsUnderTest(api.url())[name]
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				out := runSequence(t, rt, api.url())
				if tc.concurrent {
					out = append(out, runConcurrent(t, rt, api.url())...)
				}
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				s := summary(out)
				res[name] = fmt.Sprintf("%s (%d connections)", s, api.conns.Load())
				if name == "agent" {
					if strings.Contains(s, "CROSS-TALK") {
						t.Errorf("the agent's client handed a caller bytes not written for it: %s", s)
					}
					if tc.pastBounds && strings.Contains(s, "own") {
						t.Errorf("the agent's client took a head past its bounds: %s", s)
					}
					if huge {
						// Six calls: about 1 MiB each (the head's limit is
						// 64 KiB; textproto grows its line as it reads);
						// TotalAlloc is the whole process's, and under the
						// race detector on a loaded machine it read 11 MiB
						// once, so the bound is 24 MiB: still far below one
						// 64 MiB head read whole.
						if grew := after.TotalAlloc - before.TotalAlloc; grew > 24<<20 {
							t.Errorf("the agent's client allocated %d MiB for six calls answered by a 64 MiB head", grew>>20)
						}
					}
				}
				rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
			}
			// Where the Transport gives every caller its own answer, so must
			// the agent's client.
			if !tc.pastBounds && !strings.Contains(res["transport"], "error") && !strings.Contains(res["transport"], "status") &&
				!strings.Contains(res["transport"], "CROSS") && strings.Contains(res["agent"], "error") {
				t.Errorf("the Transport answered every caller (%s), the agent's client did not (%s)", res["transport"], res["agent"])
			}
			t.Logf("| %s | %s | %s |", tc.name, res["transport"], res["agent"])
		})
	}
}

// Over TLS, bytes a service writes on an idle connection may sit
// decrypted in TLS's buffer, where neither bufio nor the kernel shows
// them: the connection is not taken either. The behaviours that write
// more than their answer, one caller after another.
func TestUpstreamTLSConformance(t *testing.T) {
	cert := httptest.NewTLSServer(http.NotFoundHandler())
	pool := cert.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	certs := cert.TLS.Certificates
	cert.Close()
	for _, tc := range conformanceCases {
		switch tc.name {
		case "unsolicited answer while idle", "longer than its Content-Length, same write", "bytes after a chunked body",
			"204 with a body", "408 then close while idle", "well-behaved":
		default:
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			api := serveRawAPI(t, tls.NewListener(ln, &tls.Config{Certificates: certs}), tc.script)
			api.tls = true
			base, _ := url.Parse(api.url())
			u := newUpstream(base, httpx.HeadLimits{}, nil)
			u.tls.RootCAs = pool
			u.tls.ServerName = "example.com"
			defer u.CloseIdleConnections()
			out := runSequence(t, u, api.url())
			if s := summary(out); strings.Contains(s, "CROSS-TALK") || strings.Contains(s, "error") {
				t.Errorf("over TLS: %s", s)
			}
		})
	}
}

// quiet looks into TLS's own buffer too: bytes decrypted from a record
// but read by nobody are in neither bufio nor the kernel.
func TestQuietSeesTLSBuffer(t *testing.T) {
	cert := httptest.NewTLSServer(http.NotFoundHandler())
	pool := cert.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	certs := cert.TLS.Certificates
	cert.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	wrote := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		tc := tls.Server(c, &tls.Config{Certificates: certs})
		tc.Write([]byte("xyz")) // one record
		close(wrote)
		io.Copy(io.Discard, tc)
	}()
	base, _ := url.Parse("https://" + ln.Addr().String())
	u := newUpstream(base, httpx.HeadLimits{}, nil)
	u.tls.RootCAs, u.tls.ServerName = pool, "example.com"
	c, _, err := u.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-wrote
	// Take one byte through TLS itself: the record's other two stay in
	// its buffer.
	var one [1]byte
	if _, err := c.Conn.Read(one[:]); err != nil {
		t.Fatal(err)
	}
	if c.br.Buffered() != 0 || !c.alive() {
		t.Fatal("the set-up: the bytes left should be in TLS's buffer only")
	}
	if quiet(c) {
		t.Fatal("a connection with bytes in TLS's buffer was taken for quiet")
	}
}
