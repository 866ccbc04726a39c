package main

import (
	"runtime/debug"
	"testing"
)

// TestTuneGC: serve sets the collector's target to serveGCPercent only
// when the operator set neither GOGC nor GOMEMLIMIT.
func TestTuneGC(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)
	for _, tc := range []struct {
		gogc, limit string
		want        int
	}{{"", "", serveGCPercent}, {"150", "", 100}, {"", "512MiB", 100}} {
		t.Setenv("GOGC", tc.gogc)
		t.Setenv("GOMEMLIMIT", tc.limit)
		debug.SetGCPercent(100)
		tuneGC()
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("GOGC=%q GOMEMLIMIT=%q: percent %d, want %d", tc.gogc, tc.limit, got, tc.want)
		}
	}
}
