package pprofserve

import (
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
)

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func withArgs(t *testing.T, args ...string) {
	old := os.Args
	os.Args = args
	t.Cleanup(func() { os.Args = old })
}

func TestServesWhenAsked(t *testing.T) {
	addr := freeAddr(t)
	t.Setenv("PPROF_TEST_ADDR", addr)
	withArgs(t, "signagent", "serve")
	When("serve", "PPROF_TEST_ADDR")
	resp, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Fatalf("GET /debug/pprof/: %d %.200s", resp.StatusCode, body)
	}
}

func TestServesNothingOtherwise(t *testing.T) {
	for _, c := range []struct{ name, arg, addr string }{
		{"another process", "floor", freeAddr(t)},
		{"not loopback", "serve", "0.0.0.0:" + strings.Split(freeAddr(t), ":")[1]},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("PPROF_TEST_ADDR", c.addr)
			withArgs(t, "signagent", "serve")
			When(c.arg, "PPROF_TEST_ADDR")
			port := c.addr[strings.LastIndex(c.addr, ":"):]
			if conn, err := net.Dial("tcp", "127.0.0.1"+port); err == nil {
				conn.Close()
				t.Fatalf("something listens on %s", c.addr)
			}
		})
	}
}
