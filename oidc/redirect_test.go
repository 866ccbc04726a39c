package oidc

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestReceiverIgnoresForgedRedirects: a redirect that does not carry this
// sign-in's state, with an error or a code, is answered 400 and does not
// end the wait; the real one that follows is delivered.
func TestReceiverIgnoresForgedRedirects(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	req := &CodeRequest{state: "the-real-state"}
	r, err := Listen("http://"+addr+"/callback", req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	get := func(q string) (int, string) {
		resp, err := http.Get("http://" + addr + "/callback?" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, q := range []string{
		"error=access_denied",
		"error=access_denied&state=another",
		"code=stolen",
		"code=stolen&state=another",
		"code=stolen&state=",
		"code=stolen&state=the-real-stat",
		"code=stolen&state=the-real-state-and-more",
	} {
		st, body := get(q)
		if st != http.StatusBadRequest || !strings.Contains(body, "still waiting") {
			t.Errorf("%s: %d %s", q, st, body)
		}
	}
	select {
	case q := <-r.Redirects():
		t.Fatalf("a forged redirect was taken: %v", q)
	default:
	}
	if st, body := get(url.Values{"code": {"real"}, "state": {"the-real-state"}}.Encode()); st != 200 || !strings.Contains(body, "Signed in") {
		t.Fatalf("the real redirect: %d %s", st, body)
	}
	select {
	case q := <-r.Redirects():
		if q.Get("code") != "real" {
			t.Fatalf("delivered %v", q)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the real redirect was not delivered")
	}
	if st, _ := get("nothing=here"); st != http.StatusNotFound {
		t.Fatal(fmt.Sprint("no code nor error: ", st))
	}
}
