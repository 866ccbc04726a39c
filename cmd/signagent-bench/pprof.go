//go:build pprof

package main

// Built with -tags pprof, the Go floor of signagent-bench proxy serves
// Go's profiles on the loopback address $PPROF_FLOOR_ADDR, so that it and
// the agent (signagent built with -tags pprof, $PPROF_ADDR) can be
// profiled under the same load.

import "github.com/signagent/signagent/cmd/internal/pprofserve"

func init() { pprofserve.When("floor", "PPROF_FLOOR_ADDR") }
