// Package httpxtest is a peer on raw TCP that answers with any head,
// well-formed or hostile (net/http's server writes neither a head of
// 100,000 tiny fields nor a cut one), for the tests of the clients that
// bound the heads they read (httpx.HeadLimits).
package httpxtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/signagent/signagent/errdefs"
)

// Serve answers every request with answer(its path) on a loopback
// listener, until the test ends, and returns its http:// address.
func Serve(t testing.TB, answer func(path string) string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + ServeOn(t, ln, answer)
}

// ServeOn is Serve on ln (a TLS listener, say); it returns ln's address.
func ServeOn(t testing.TB, ln net.Listener, answer func(path string) string) string {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if _, err := io.WriteString(c, answer(req.URL.Path)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// Fields is a 200 whose head has n fields (Content-Length among them),
// each its own key, and the body "ok".
func Fields(n int) string {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, "X-H%d: v\r\n", i)
	}
	b.WriteString("Content-Length: 2\r\n\r\nok")
	return b.String()
}

// TinyFields is a 200 whose head has n fields "a:b" more, the cheapest
// to send and, each a value of one key, still about 50 bytes to hold.
func TinyFields(n int) string {
	return "HTTP/1.1 200 OK\r\n" + strings.Repeat("a:b\r\n", n) + "Content-Length: 2\r\n\r\nok"
}

// BigHead is a 200 whose head has one field of size bytes.
func BigHead(size int) string {
	return "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", size) + "\r\nContent-Length: 2\r\n\r\nok"
}

// Hostile are the heads every bounded client is tried with (issue 45):
// 100,000 tiny fields, and 65 KiB in one field.
func Hostile() map[string]string {
	return map[string]string{"100,000 tiny fields": TinyFields(100000), "a head of 65 KiB": BigHead(65 << 10)}
}

// Refused reports whether err is a client's refusal of a hostile head as
// the bounded clients word it: one line that says the peer "answered a
// head" past a bound, of the kind errdefs.ErrUnreachable.
func Refused(err error) bool {
	return err != nil && errors.Is(err, errdefs.ErrUnreachable) && !strings.Contains(err.Error(), "\n") &&
		strings.Contains(err.Error(), " answered a head ")
}
