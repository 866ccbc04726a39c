package main

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
)

// TestHeaderLoginRetries: a legacy login by header (and api) is bounded by
// the scheme's limit, not by --request-timeout, so --attempts tries a
// request that timed out again: a business API that takes connections and
// never answers gets two, where one deadline for the whole login once cut
// the second.
func TestHeaderLoginRetries(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int32
	go func() {
		var held []net.Conn // never answered, closed at the end
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			held = append(held, c)
		}
	}()
	env := []string{"SIGNAGENT_DEVELOPER_KEY=testClient-5a6b7c8d9e", "SIGNAGENT_PASSWORD=pw"}
	code, stderr, _ := runBinary(t, signagent(t, env, "header", "--no-agent", "--scheme", "legacy", "--by", "password", "--login", "a@example.com",
		"--business-url", "http://"+ln.Addr().String(), "--request-timeout", "1s", "--attempts", "2"))
	if code != cmdutil.ExitTransport || strings.Count(strings.TrimSpace(stderr), "\n") > 1 {
		t.Fatalf("exit %d, want %d: %s", code, cmdutil.ExitTransport, stderr)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections to the business API, want 2 (--attempts 2): %s", n, stderr)
	}
}
