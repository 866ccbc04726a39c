package redirect

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/errdefs"
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
	r, err := Listen("http://"+addr+"/callback", "the-real-state")
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

func TestPasted(t *testing.T) {
	t.Parallel()
	q, err := ParsePasted("  http://127.0.0.1:8765/callback?code=abc&state=xyz&scope=openid#frag \n")
	if err != nil || q.Get("code") != "abc" || q.Get("state") != "xyz" {
		t.Fatalf("%v %v", q, err)
	}
	if _, err := ParsePasted("hello"); !errors.Is(err, errdefs.ErrInvalidInput) {
		t.Fatalf("err = %v", err)
	}
}
