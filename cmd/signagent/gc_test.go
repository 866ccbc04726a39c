package main

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/signagent/signagent/cmd/signagent/internal/agentcmd"
)

// TestTuneGC: serve sets the collector's target to serveGCPercent, with a
// soft memory limit of twice the body budget plus 64 MiB, only when the
// operator set neither GOGC nor GOMEMLIMIT.
func TestTuneGC(t *testing.T) {
	origPercent := debug.SetGCPercent(100)
	origLimit := debug.SetMemoryLimit(math.MaxInt64)
	defer func() { debug.SetGCPercent(origPercent); debug.SetMemoryLimit(origLimit) }()
	for _, tc := range []struct {
		gogc, limit string
		percent     int
		memLimit    int64
	}{
		{"", "", agentcmd.ServeGCPercent, 2*(16<<20) + 64<<20},
		{"150", "", 100, math.MaxInt64},
		{"", "512MiB", 100, math.MaxInt64},
	} {
		t.Setenv("GOGC", tc.gogc)
		t.Setenv("GOMEMLIMIT", tc.limit)
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
		agentcmd.TuneGC(16 << 20)
		if got := debug.SetGCPercent(100); got != tc.percent {
			t.Errorf("GOGC=%q GOMEMLIMIT=%q: percent %d, want %d", tc.gogc, tc.limit, got, tc.percent)
		}
		if got := debug.SetMemoryLimit(-1); got != tc.memLimit {
			t.Errorf("GOGC=%q GOMEMLIMIT=%q: memory limit %d, want %d", tc.gogc, tc.limit, got, tc.memLimit)
		}
	}
}
