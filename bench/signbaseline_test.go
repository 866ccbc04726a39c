package bench

import (
	"testing"
	"time"
)

// With a baseline agent (bench --baseline-agent), the ratios compare the
// agent's /v1/signatures with the baseline's at p50 and p99 and in CPU per
// call, at each concurrency both were measured at; without it, or where
// /proc counted no CPU for one of them, no ratio is made.
func TestSignRatiosWithBaseline(t *testing.T) {
	us := time.Microsecond
	at := map[string]*Result{
		"agent /v1/signatures/1": latencies(1000, 2000), "baseline /v1/signatures/1": latencies(1250, 1600),
		"agent /v1/signatures/8": latencies(8000, 9900), "baseline /v1/signatures/8": latencies(8000, 9000),
	}
	perCall := map[string]time.Duration{"agent /v1/signatures/1": 1200 * us, "baseline /v1/signatures/1": 1000 * us,
		"agent /v1/signatures/8": 1100 * us}
	rs := signRatios(at, perCall, []int{1, 8})
	wantRatios(t, rs, map[string]float64{
		"/v1/signatures agent / baseline, p50 at 1": 0.8, "/v1/signatures agent / baseline, p99 at 1": 1.25,
		"/v1/signatures agent / baseline, p50 at 8": 1, "/v1/signatures agent / baseline, p99 at 8": 1.1,
		"CPU per call, agent / baseline (c1)": 1.2,
	})
	if len(rs) != 5 {
		t.Errorf("%d ratios, want 5 (no CPU ratio at c8, where the baseline has no figure): %v", len(rs), rs)
	}
	delete(at, "baseline /v1/signatures/1")
	delete(at, "baseline /v1/signatures/8")
	delete(perCall, "baseline /v1/signatures/1")
	if rs := signRatios(at, perCall, []int{1, 8}); len(rs) != 0 {
		t.Errorf("without a baseline: %v", rs)
	}
}

// A row's CPU per call is its process's CPU over its calls, in its note;
// under one /proc clock tick is said so and gives no figure to compare.
func TestCPUNote(t *testing.T) {
	r := &Result{Ops: 100}
	if per := cpuNote(r, 20*time.Millisecond); per != 200*time.Microsecond || r.Note != "CPU 200.0µs/call" {
		t.Errorf("20ms over 100 calls: %v, %q", per, r.Note)
	}
	r = &Result{Ops: 1000}
	if per := cpuNote(r, 0); per != 0 || r.Note != "CPU <10.0µs/call (under one 10ms clock tick)" {
		t.Errorf("no tick over 1000 calls: %v, %q", per, r.Note)
	}
	if per := cpuNote(&Result{}, time.Second); per != 0 {
		t.Errorf("no call: %v", per)
	}
}
