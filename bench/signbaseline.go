package bench

// The sign suite's --baseline-agent: the agent's /v1/signatures against
// another signagent binary's (an earlier build), started the same way on
// the same token and measured in the same interleaved rounds.

import (
	"context"
	"fmt"
	"time"
)

// signTarget is an agent whose /v1/signatures is measured: its row name,
// one call and its process (for CPU per call).
type signTarget struct {
	name string
	op   func(context.Context) string
	pid  int
}

// baselineSignName is the row of the baseline agent's /v1/signatures.
const baselineSignName = "baseline /v1/signatures"

// interleaved measures each target at n callers for o.Each, spread over
// o.Rounds rounds that take the targets in turn (in the opposite order
// every other round), so that the machine's drift falls on both alike;
// each row's note is its process's CPU per call, returned by row name
// ("/n" appended) when /proc counted some.
func (o *Options) interleaved(ctx context.Context, n int, targets []signTarget) ([]*Result, map[string]time.Duration) {
	rounds := max(o.Rounds, 1)
	merged := make([]*Result, len(targets))
	spent := make([]time.Duration, len(targets))
	for round := range rounds {
		for k := range targets {
			// Every other round takes them the other way round, so that
			// neither always runs right after the other's burst.
			i := k
			if round%2 == 1 {
				i = len(targets) - 1 - k
			}
			t := targets[i]
			before := processCPU(t.pid)
			merged[i] = merge(merged[i], RunContext(ctx, t.name, n, o.Each/time.Duration(rounds), t.op))
			spent[i] += processCPU(t.pid) - before
		}
	}
	perCall := map[string]time.Duration{}
	for i, t := range targets {
		if per := cpuNote(merged[i], spent[i]); per > 0 {
			perCall[fmt.Sprintf("%s/%d", t.name, n)] = per
		}
	}
	return merged, perCall
}

// signRatios compare the agent's /v1/signatures with the baseline
// agent's at each concurrency: p50, p99 and CPU per call, where both
// were measured (at: rows by "name/concurrency", perCall: CPU per call
// likewise).
func signRatios(at map[string]*Result, perCall map[string]time.Duration, conc []int) []Ratio {
	var out []Ratio
	add := func(name string, a, b time.Duration) {
		if a > 0 && b > 0 {
			out = append(out, Ratio{name, float64(a) / float64(b)})
		}
	}
	for _, c := range conc {
		ours, base := at[fmt.Sprintf("%s/%d", agentSignName, c)], at[fmt.Sprintf("%s/%d", baselineSignName, c)]
		if ours == nil || base == nil {
			continue
		}
		add(fmt.Sprintf("/v1/signatures agent / baseline, p50 at %d", c), ours.Percentile(50), base.Percentile(50))
		add(fmt.Sprintf("/v1/signatures agent / baseline, p99 at %d", c), ours.Percentile(99), base.Percentile(99))
	}
	for _, c := range conc {
		add(fmt.Sprintf("CPU per call, agent / baseline (c%d)", c),
			perCall[fmt.Sprintf("%s/%d", agentSignName, c)], perCall[fmt.Sprintf("%s/%d", baselineSignName, c)])
	}
	return out
}
