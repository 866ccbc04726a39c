package storetest

import (
	"errors"
	"net"
	"os/exec"
	"testing"
)

// TestPortTaken: a server whose port another took says so (and start
// tries another port), rather than waiting on, or answering for, the other.
func TestPortTaken(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed: make test installs it (scripts/deps.sh redis-server)")
	}
	other := Start(t)
	_, port, _ := net.SplitHostPort(other.Addr)
	if _, err := startOn(t, bin, port, t.TempDir(), false, nil); !errors.Is(err, errPortTaken) {
		t.Fatalf("a second server on %s: %v, want the port taken", other.Addr, err)
	}
	if got := Command(other.Addr, "PING"); got != "PONG" {
		t.Fatalf("the first server answers %q", got)
	}
}

// TestRestart: a server stopped (killed) and started again with
// "appendonly yes" answers on its address with what it had acknowledged.
func TestRestart(t *testing.T) {
	s := Start(t, "appendonly yes", "appendfsync always")
	if got := Command(s.Addr, "SET", "k", "v"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	s.Stop()
	if got := Command(s.Addr, "PING"); got != "" {
		t.Fatalf("a stopped server answers %q", got)
	}
	s.Restart(t)
	if got := Command(s.Addr, "GET", "k"); got != "v" {
		t.Fatalf("after the restart: GET k = %q, want v", got)
	}
}
