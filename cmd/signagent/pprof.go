//go:build pprof

package main

// Built with -tags pprof (never in a release), signagent serves Go's
// profiles on the loopback address $PPROF_ADDR (127.0.0.1:6060, say), for
// profiling the agent under load: `go build -tags pprof ./cmd/signagent`,
// then `PPROF_ADDR=127.0.0.1:6060 signagent bench proxy` and
// `go tool pprof http://127.0.0.1:6060/debug/pprof/profile?seconds=15`.

import (
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"slices"
	"strings"
)

func init() {
	addr := os.Getenv("PPROF_ADDR")
	if addr == "" || !strings.HasPrefix(addr, "127.0.0.1:") {
		return
	}
	// The agent only: bench proxy runs this binary too, and starts the
	// agent from it.
	if !slices.Contains(os.Args, "serve") {
		return
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		go http.Serve(l, http.DefaultServeMux)
	}
}
