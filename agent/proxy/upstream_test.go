package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/internal/httpx"
)

// countingServer is a real HTTP server that counts the connections it
// accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func roundTrip(t *testing.T, u *upstream, method, target, body string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest(method, target, strings.NewReader(body))
	if body == "" {
		req.Body = http.NoBody
	}
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
	resp, err := u.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), nil
}

// The proxy's upstream keeps its connections: many calls, one connection;
// an answer not read to its end costs its connection, not the next call.
func TestUpstreamKeepsConnections(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Got", r.Method+" "+r.URL.RequestURI()+" "+string(b))
		io.WriteString(w, strings.Repeat("x", 100))
	})
	base, _ := url.Parse(srv.URL)
	u := newUpstream(base, httpx.HeadLimits{}, nil)
	for i := range 50 {
		method, body := "GET", ""
		if i%2 == 1 {
			method, body = "POST", "payload"
		}
		code, got, err := roundTrip(t, u, method, srv.URL+"/GetMyOrganizations?x=1", body)
		if err != nil || code != 200 || len(got) != 100 {
			t.Fatalf("call %d: %d %q %v", i, code, got, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("50 calls one at a time took %d connections, want 1", n)
	}
	// An answer closed half read: that connection is not reused.
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	resp, err := u.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 10))
	resp.Body.Close()
	if code, _, err := roundTrip(t, u, "GET", srv.URL+"/", ""); err != nil || code != 200 {
		t.Fatalf("after a half-read answer: %d %v", code, err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the half-read one dropped)", n)
	}
}

// A kept connection the service closed while it was idle: a POST is not
// sent on it (the kernel knows it closed) but on a new one; a GET that
// met it is sent again on a new one, once.
func TestUpstreamStaleConnection(t *testing.T) {
	var calls atomic.Int64
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	base, _ := url.Parse(srv.URL)
	u := newUpstream(base, httpx.HeadLimits{}, nil)
	if _, _, err := roundTrip(t, u, "POST", srv.URL+"/", "one"); err != nil {
		t.Fatal(err)
	}
	srv.CloseClientConnections() // the service drops its idle connections
	time.Sleep(50 * time.Millisecond)
	code, got, err := roundTrip(t, u, "POST", srv.URL+"/", "two")
	if err != nil || code != 200 || got != "two" {
		t.Fatalf("after the service closed the idle connection: %d %q %v", code, got, err)
	}
	if calls.Load() != 2 || conns.Load() != 2 {
		t.Fatalf("%d calls on %d connections, want 2 and 2", calls.Load(), conns.Load())
	}
	// The GET path: the liveness peek is skipped, the failed send retried.
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	if code, _, err := roundTrip(t, u, "GET", srv.URL+"/", ""); err != nil || code != 200 {
		t.Fatalf("a GET after the service closed the idle connection: %d %v", code, err)
	}
	if calls.Load() != 3 || conns.Load() != 3 {
		t.Fatalf("%d calls on %d connections, want 3 and 3", calls.Load(), conns.Load())
	}
}

// A POST whose connection breaks after it was sent is not sent again: the
// service may have acted on it.
func TestUpstreamPostNotResent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var requests atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						c.Close()
						return
					}
					if requests.Add(1) == 1 {
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
						continue
					}
					c.Close() // the second request: read, then the connection drops
					return
				}
			}(c)
		}
	}()
	base, _ := url.Parse("http://" + l.Addr().String())
	u := newUpstream(base, httpx.HeadLimits{}, nil)
	if _, _, err := roundTrip(t, u, "POST", base.String()+"/", "first"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := roundTrip(t, u, "POST", base.String()+"/", "second"); err == nil {
		t.Fatal("no error for a POST whose connection dropped")
	}
	time.Sleep(50 * time.Millisecond)
	if n := requests.Load(); n != 2 {
		t.Fatalf("the service got %d requests, want 2 (the POST not sent again)", n)
	}
}

// A request's deadline ends a call the service does not answer, and the
// connection is not kept.
func TestUpstreamDeadline(t *testing.T) {
	release := make(chan struct{})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		io.WriteString(w, "ok")
	})
	defer close(release)
	base, _ := url.Parse(srv.URL)
	u := newUpstream(base, httpx.HeadLimits{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/slow", nil)
	start := time.Now()
	if _, err := u.RoundTrip(req); err == nil {
		t.Fatal("no error past the deadline")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the deadline ended the call after %v", d)
	}
	if code, got, err := roundTrip(t, u, "GET", srv.URL+"/", ""); err != nil || code != 200 || got != "ok" {
		t.Fatalf("the next call: %d %q %v", code, got, err)
	}
}

// An interim 100 Continue is passed over to the final answer.
func TestUpstreamInterimAnswer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		c.Read(buf)
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal")
		time.Sleep(200 * time.Millisecond)
	}()
	base, _ := url.Parse("http://" + l.Addr().String())
	u := newUpstream(base, httpx.HeadLimits{}, nil)
	code, got, err := roundTrip(t, u, "POST", base.String()+"/", "body")
	if err != nil || code != 200 || got != "final" {
		t.Fatalf("%d %q %v", code, got, err)
	}
}

// The proxy's identity cache answers what parsing answers, keeps no
// refused value, and stays bounded whatever callers send.
func TestIdentityCache(t *testing.T) {
	var c identityCache
	for range 2 {
		sel, err := c.parse("oidc profile=bench", false)
		want, _ := ParseIdentity("oidc profile=bench", false)
		if err != nil || sel != want {
			t.Fatalf("cached %+v %v, parsed %+v", sel, err, want)
		}
	}
	if _, err := c.parse("no such scheme", false); err == nil {
		t.Fatal("a bad identity parsed")
	}
	if _, ok := c.m["no such scheme"]; ok {
		t.Fatal("a refused identity was kept")
	}
	for i := range 3 * maxCachedIdentities {
		if _, err := c.parse("oidc profile=p"+strconv.Itoa(i), false); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.m) > maxCachedIdentities {
		t.Fatalf("%d identities kept, at most %d", len(c.m), maxCachedIdentities)
	}
}

// A body is held whole whatever its length and however it comes: none, a
// short one of unknown length (no copy buffer taken), a long one.
func TestHeldBodies(t *testing.T) {
	b := newBodyBudget(1 << 20)
	for _, n := range []int{0, 1, 511, 512, 513, 100 << 10} {
		body := strings.Repeat("b", n)
		h, err := b.hold(io.NopCloser(strings.NewReader(body)), 0)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		got, _ := io.ReadAll(h.reader())
		if string(got) != body || h.size != int64(n) {
			t.Fatalf("%d bytes held as %d", n, len(got))
		}
		h.Close()
	}
	// A request the server read no body for takes nothing, and its Close
	// gives nothing back.
	h, err := b.hold(http.NoBody, 0)
	if err != nil || h.size != 0 || h.held != 0 {
		t.Fatalf("no body: %v %+v", err, h)
	}
	h.Close()
	if !b.sem.TryAcquire(1 << 20) {
		t.Fatal("the budget was not given back")
	}
	if b.sem.TryAcquire(1) {
		t.Fatal("the budget grew")
	}
}

// TestWriteRequest: what writeRequest writes reads back (net/http's own
// request parser) as the same request http.Request.Write would have sent:
// method, target, Host, headers, length and body, for requests with and
// without a body, a query, an escaped path, an empty User-Agent (none
// sent; the proxy always sets one), several values of one header, a
// value with a line break (made a space, not a second header), and Close.
func TestWriteRequest(t *testing.T) {
	mk := func(method, target, body string, h http.Header, close bool) *http.Request {
		u, _ := url.Parse("http://svc.example:8080" + target)
		r := &http.Request{Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Host: "", Close: close, Body: http.NoBody}
		if body != "" {
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
		}
		return r
	}
	for i, r := range []*http.Request{
		mk("GET", "/V3/GetMyOrganizations?autoRegister=false", "", http.Header{"User-Agent": {""}, "Authorization": {"Bearer x"}, "X-Request-Id": {"r-1"}}, false),
		mk("POST", "/V3/Post%20Message", `{"a":1}`, http.Header{"User-Agent": {"crm/1"}, "Accept": {"a/b", "c/d"}, "Content-Type": {"application/json"}}, false),
		mk("POST", "/empty", "", http.Header{"User-Agent": {""}, "X-Odd": {" spaced\r\nInjected: 1 "}}, true),
	} {
		var want, got bytes.Buffer
		if err := r.Write(&want); err != nil {
			t.Fatal(err)
		}
		if r.Body != http.NoBody {
			r.Body = io.NopCloser(strings.NewReader(mustBody(t, want.Bytes())))
		}
		bw := bufio.NewWriter(&got)
		if err := writeRequest(bw, r, "svc.example:8080"); err != nil {
			t.Fatal(err)
		}
		bw.Flush()
		a, b := readBack(t, want.Bytes()), readBack(t, got.Bytes())
		if a.Method != b.Method || a.RequestURI != b.RequestURI || a.Host != b.Host || a.ContentLength != b.ContentLength || a.Close != b.Close {
			t.Errorf("%d: %s %s %s %d %v, want %s %s %s %d %v", i, b.Method, b.RequestURI, b.Host, b.ContentLength, b.Close, a.Method, a.RequestURI, a.Host, a.ContentLength, a.Close)
		}
		delete(a.Header, "Connection")
		delete(b.Header, "Connection")
		if !reflect.DeepEqual(a.Header, b.Header) {
			t.Errorf("%d: headers %v, want %v", i, b.Header, a.Header)
		}
		ab, _ := io.ReadAll(a.Body)
		bb, _ := io.ReadAll(b.Body)
		if string(ab) != string(bb) {
			t.Errorf("%d: body %q, want %q", i, bb, ab)
		}
	}
}

func readBack(t *testing.T, b []byte) *http.Request {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("%v in %q", err, b)
	}
	return r
}

// mustBody is the body of a request written by Request.Write (which
// consumed the original).
func mustBody(t *testing.T, b []byte) string {
	t.Helper()
	body, _ := io.ReadAll(readBack(t, b).Body)
	return string(body)
}

// TestIsEventStream: server-sent events are flushed as they come,
// whatever the parameters or the case; other types are not.
func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{"text/event-stream": true, "Text/Event-Stream; charset=utf-8": true,
		"text/event-streams": false, "application/json": false, "": false, "text/event": false} {
		if got := isEventStream(ct); got != want {
			t.Errorf("%q: %v", ct, got)
		}
	}
}

// A request cancelled between the head and the lifting of the head's
// deadline still ends the body's read: the lifting must not clear the
// deadline the cancellation set (issue 36, item 4).
func TestUpstreamCancelBetweenHeadAndBody(t *testing.T) {
	api := startRawAPI(t, func(c net.Conn, who string, _ int) bool {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-For: "+who+"\r\nContent-Length: 100\r\n\r\nsome") // the rest never comes
		io.Copy(io.Discard, c)                                                                    // until the client closes
		return false
	})
	base, _ := url.Parse(api.url())
	u := newUpstream(base, httpx.HeadLimits{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u.afterHead = func() {
		cancel()
		time.Sleep(20 * time.Millisecond) // the cancellation's hook has run
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", api.url()+"/", nil) // no deadline: the head's applies
	resp, err := u.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(resp.Body)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cut-off body read to its end")
		}
	case <-time.After(3 * time.Second):
		resp.Body.Close()
		t.Fatal("the body's read went on with no deadline after the request was cancelled")
	}
	resp.Body.Close()
}
