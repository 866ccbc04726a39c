package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

// latencies is a row whose every call took one of us (microseconds).
func latencies(us ...int) *Result {
	r := &Result{}
	for _, u := range us {
		r.lat = append(r.lat, time.Duration(u)*time.Microsecond)
	}
	return r
}

// wantRatios checks that rs has each ratio of want, with its value.
func wantRatios(t *testing.T, rs []Ratio, want map[string]float64) {
	t.Helper()
	got := map[string]float64{}
	for _, r := range rs {
		got[r.Name] = r.Value
	}
	for name, w := range want {
		if v, ok := got[name]; !ok || math.Abs(v-w) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, w)
		}
	}
}

// noRatioNaming checks that no ratio of rs names row (a row not measured).
func noRatioNaming(t *testing.T, rs []Ratio, row string) {
	t.Helper()
	for _, r := range rs {
		if strings.Contains(r.Name, row) {
			t.Errorf("without %s: %s = %v", row, r.Name, r.Value)
		}
	}
}

// With a baseline agent (bench proxy --baseline-agent), the ratios compare
// the agent with it at p50 and p99, and the baseline with nginx and the
// Go floor, so that one run gives both sides of a change; without it, no
// ratio names it.
func TestProxyRatiosWithBaseline(t *testing.T) {
	at := map[string]*Result{
		"direct/8": latencies(100), "readyz/8": latencies(50), "authorizations/8": latencies(55), "proxy unix/8": latencies(165),
		"nginx/8": latencies(200, 400), "go floor/8": latencies(220, 440), "proxy tcp/8": latencies(264, 600),
		"baseline tcp/8": latencies(240, 500),
	}
	wantRatios(t, proxyRatios(at, []int{8}), map[string]float64{
		"proxy tcp / baseline tcp, p50 at 8": 1.1, "proxy tcp / baseline tcp, p99 at 8": 1.2,
		"baseline tcp / nginx, p50 at 8": 1.2, "baseline tcp / nginx, p99 at 8": 1.25,
		"baseline tcp / go floor, p50 at 8": 240.0 / 220,
		// the agent's own ratios are there as without a baseline
		"proxy tcp / nginx, p50 at 8": 1.32, "proxy tcp / nginx, p99 at 8": 1.5, "proxy tcp / go floor, p50 at 8": 1.2,
	})
	delete(at, "baseline tcp/8")
	noRatioNaming(t, proxyRatios(at, []int{8}), "baseline")
}

// CPU per call is compared for every pair of measured rows, the baseline
// agent's too; a row without a figure (nginx absent, no baseline) gives
// no ratio rather than a zero or an infinity.
func TestCPURatios(t *testing.T) {
	us := time.Microsecond
	per := map[string]time.Duration{"nginx/1": 30 * us, "go floor/1": 45 * us, "proxy tcp/1": 60 * us, "baseline tcp/1": 50 * us}
	all := cpuRatios(per, []int{1})
	wantRatios(t, all, map[string]float64{
		"CPU per call, proxy tcp / nginx (c1)": 2, "CPU per call, go floor / nginx (c1)": 1.5,
		"CPU per call, proxy tcp / go floor (c1)": 60.0 / 45, "CPU per call, proxy tcp / baseline tcp (c1)": 1.2,
		"CPU per call, baseline tcp / nginx (c1)": 50.0 / 30, "CPU per call, baseline tcp / go floor (c1)": 50.0 / 45,
	})
	if len(all) != 6 {
		t.Errorf("%d ratios, want 6: %v", len(all), all)
	}
	delete(per, "baseline tcp/1")
	delete(per, "nginx/1")
	if r := cpuRatios(per, []int{1}); len(r) != 1 || r[0].Name != "CPU per call, proxy tcp / go floor (c1)" {
		t.Errorf("the floor and the agent only: %v", r)
	}
}
