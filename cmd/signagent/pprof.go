//go:build pprof

package main

// Built with -tags pprof (never in a release), signagent serves Go's
// profiles on the loopback address $PPROF_ADDR (127.0.0.1:6060, say), for
// profiling the agent under load: `go build -tags pprof ./cmd/signagent`,
// then `PPROF_ADDR=127.0.0.1:6060 signagent-bench proxy` and
// `go tool pprof http://127.0.0.1:6060/debug/pprof/profile?seconds=15`.
// signagent-bench's Go floor serves its own on $PPROF_FLOOR_ADDR (built
// with -tags pprof too), so that the two can be profiled under the same
// load.

import "github.com/signagent/signagent/cmd/internal/pprofserve"

// The agent only: signagent-bench starts it with serve.
func init() { pprofserve.When("serve", "PPROF_ADDR") }
