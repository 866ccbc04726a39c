package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/signagent/signagent/errdefs"
)

// The Go floor does what bench proxy's nginx does for the call: a caller
// without the bearer is refused before the business API hears of it; one
// with it gets the API's answer, the API sees the fixed header (not the
// caller's), and the upstream connection is kept for the next call.
func TestFloorProxy(t *testing.T) {
	var conns, calls atomic.Int32
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Authorization") != "Bearer upstream" || r.URL.RequestURI() != "/GetMyOrganizations?autoRegister=false" {
			http.Error(w, "wrong call: "+r.Header.Get("Authorization")+" "+r.URL.RequestURI(), http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(upstreamAnswer)
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	floor := httptest.NewServer(FloorProxy(up.Listener.Addr().String(), "s3cret"))
	defer floor.Close()

	var contentType string
	call := func(method, auth string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, floor.URL+"/GetMyOrganizations?autoRegister=false", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		contentType = resp.Header.Get("Content-Type")
		return resp.StatusCode, string(b)
	}
	for _, auth := range []string{"", "Bearer s3cre", "Bearer s3cret2", "s3cret"} {
		if code, _ := call("GET", auth); code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", auth, code)
		}
	}
	if calls.Load() != 0 {
		t.Fatalf("the business API was called %d times for refused callers", calls.Load())
	}
	for range 3 {
		if code, body := call("GET", "Bearer s3cret"); code != http.StatusOK || body != string(upstreamAnswer) {
			t.Fatalf("with the bearer: %d %q", code, body)
		}
		if contentType != "application/json" {
			t.Fatalf("the answer's Content-Type %q, want the API's application/json", contentType)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d upstream connections for three calls in a row, want 1 (kept alive)", n)
	}
	if code, _ := call("POST", "Bearer s3cret"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", code)
	}
	// The business API gone: 502, not a hang or a crash.
	up.Close()
	if code, _ := call("GET", "Bearer s3cret"); code != http.StatusBadGateway {
		t.Errorf("upstream gone: %d, want 502", code)
	}
}

func TestServeFloorLoopbackOnly(t *testing.T) {
	for _, c := range []struct{ listen, upstream, bearer, want string }{
		{"0.0.0.0:0", "127.0.0.1:9", "b", `not "0.0.0.0:0"`},
		{"127.0.0.1:0", "192.0.2.1:80", "b", `not "192.0.2.1:80"`},
		{"localhost:0", "127.0.0.1:9", "b", `not "localhost:0"`},
		{"127.0.0.1:0", "127.0.0.1:9", "", "needs a bearer token"},
	} {
		err := ServeFloor(context.Background(), c.listen, c.upstream, c.bearer)
		if !errors.Is(err, errdefs.ErrInvalidInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// The ratios name the rows they divide, and a row not measured (nginx
// absent) gives no ratio rather than a zero or an infinity.
func TestProxyRatiosWithFloor(t *testing.T) {
	row := latencies
	at := map[string]*Result{
		"direct/1": row(100), "readyz/1": row(50), "authorizations/1": row(55),
		"nginx/1": row(200), "go floor/1": row(220), "proxy tcp/1": row(264), "proxy unix/1": row(165),
	}
	wantRatios(t, proxyRatios(at, []int{1}), map[string]float64{
		"proxy tcp / nginx, p50 at 1": 1.32, "go floor / nginx, p50 at 1": 1.1, "go floor / nginx, p99 at 1": 1.1,
		"proxy tcp / go floor, p50 at 1": 1.2, "proxy unix / (direct + hop), p50 at 1": 1.1, "authorizations / readyz, p50 at 1": 1.1,
	})
	delete(at, "nginx/1")
	noRatioNaming(t, proxyRatios(at, []int{1}), "nginx")
}
