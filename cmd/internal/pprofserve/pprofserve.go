// Package pprofserve serves Go's profiles (net/http/pprof) on a loopback
// address, for the binaries built with -tags pprof (never a release): only
// their pprof.go files import it, so that no other build carries the
// profile handlers.
package pprofserve

import (
	"net"
	"net/http"
	_ "net/http/pprof" // the handlers, on http.DefaultServeMux
	"os"
	"slices"
	"strings"
)

// When serves the profiles on the address in the environment variable env
// when the process was started with the argument arg (the one process of
// several that is to be profiled), and the address is on 127.0.0.1: the
// profiles are never offered beyond this machine. A listener that cannot
// be opened serves nothing and stops nothing.
func When(arg, env string) {
	if !slices.Contains(os.Args, arg) {
		return
	}
	if addr := os.Getenv(env); strings.HasPrefix(addr, "127.0.0.1:") {
		if l, err := net.Listen("tcp", addr); err == nil {
			go http.Serve(l, http.DefaultServeMux)
		}
	}
}
