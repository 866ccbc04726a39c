//go:build pprof

package main

// Built with -tags pprof, the Go floor of signagent-bench proxy serves
// Go's profiles on the loopback address $PPROF_FLOOR_ADDR, so that it and
// the agent (signagent built with -tags pprof, $PPROF_ADDR) can be
// profiled under the same load.

import (
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"slices"
	"strings"
)

func init() {
	if !slices.Contains(os.Args, "floor") {
		return
	}
	if addr := os.Getenv("PPROF_FLOOR_ADDR"); strings.HasPrefix(addr, "127.0.0.1:") {
		if l, err := net.Listen("tcp", addr); err == nil {
			go http.Serve(l, http.DefaultServeMux)
		}
	}
}
