// Package bench measures signagent: raw token signatures, CMS signatures,
// and the agent over its socket, and prints them side by side with ratios
// against the raw token rate of the same run, so that figures from a noisy
// machine still compare.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Result is one measured row.
type Result struct {
	Name        string
	Concurrency int
	Ops         int
	Errors      map[string]int // by kind, e.g. "429"
	Elapsed     time.Duration
	lat         []time.Duration // successful operations, sorted
	Note        string
	// Value replaces the rate columns for rows that are a single figure
	// (memory, start-up time).
	Value string
	// Base is the raw token row this row is compared with (nil: the table's).
	Base *Result
}

// Rate is successful operations per second.
func (r *Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(len(r.lat)) / r.Elapsed.Seconds()
}

// Percentile returns the p-th percentile (0..100) of the successful
// operations' latency.
func (r *Result) Percentile(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(float64(len(r.lat))*p/100+0.5) - 1
	return r.lat[min(max(i, 0), len(r.lat)-1)]
}

// ErrorCount is the number of failed operations.
func (r *Result) ErrorCount() int {
	n := 0
	for _, c := range r.Errors {
		n += c
	}
	return n
}

// Run calls op from conc goroutines for d (after a short warm-up that is not
// counted) and records the latency of each call. op returns an error kind
// ("" for success).
func Run(name string, conc int, d time.Duration, op func(context.Context) string) *Result {
	return RunContext(context.Background(), name, conc, d, op)
}

// RunContext is Run that ends early when ctx is done.
func RunContext(ctx context.Context, name string, conc int, d time.Duration, op func(context.Context) string) *Result {
	warm := time.Now().Add(min(d/10, 500*time.Millisecond))
	for time.Now().Before(warm) && ctx.Err() == nil {
		op(ctx)
	}
	var (
		mu     sync.Mutex
		lat    []time.Duration
		errs   = map[string]int{}
		ops    atomic.Int64
		wg     sync.WaitGroup
		start  = time.Now()
		finish = start.Add(d)
	)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			mineErr := map[string]int{}
			for time.Now().Before(finish) && ctx.Err() == nil {
				t0 := time.Now()
				kind := op(ctx)
				ops.Add(1)
				if kind == "" {
					mine = append(mine, time.Since(t0))
				} else {
					mineErr[kind]++
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			for k, v := range mineErr {
				errs[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	return &Result{Name: name, Concurrency: conc, Ops: int(ops.Load()), Errors: errs, Elapsed: elapsed, lat: lat}
}

// Table prints results with each rate as a percentage of base's rate.
// JSONRow is a row as bench --json prints it: latencies in microseconds,
// the rate against the raw token rate when the row has one.
type JSONRow struct {
	Name        string         `json:"name"`
	Concurrency int            `json:"concurrency,omitempty"`
	OpsPerSec   float64        `json:"opsPerSec,omitempty"`
	VsRaw       float64        `json:"vsRaw,omitempty"`
	P50us       float64        `json:"p50us,omitempty"`
	P99us       float64        `json:"p99us,omitempty"`
	P999us      float64        `json:"p999us,omitempty"`
	Errors      map[string]int `json:"errors,omitempty"`
	Value       string         `json:"value,omitempty"`
	Note        string         `json:"note,omitempty"`
}

// JSON writes the rows as one JSON document with the run's header fields.
func JSON(w io.Writer, header map[string]any, rows []*Result, base *Result) error {
	out := make([]JSONRow, 0, len(rows))
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	for _, r := range rows {
		j := JSONRow{Name: r.Name, Concurrency: r.Concurrency, Value: r.Value, Note: r.Note, Errors: r.Errors}
		if r.Value == "" {
			j.OpsPerSec, j.P50us, j.P99us, j.P999us = r.Rate(), us(r.Percentile(.5)), us(r.Percentile(.99)), us(r.Percentile(.999))
			b := r.Base
			if b == nil {
				b = base
			}
			if b != nil && b.Rate() > 0 {
				j.VsRaw = r.Rate() / b.Rate()
			}
		}
		out = append(out, j)
	}
	header["rows"] = out
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(header)
}

// Table writes rows as an aligned table, each rate also as a ratio of
// base's (the raw token rate), to w.
func Table(w io.Writer, rows []*Result, base *Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "what\tconc\tops/s\tvs raw\tp50\tp99\tp99.9\terrors\tnote\t")
	for _, r := range rows {
		if r.Value != "" {
			fmt.Fprintf(tw, "%s\t\t%s\t\t\t\t\t\t%s\t\n", r.Name, r.Value, r.Note)
			continue
		}
		ratio := ""
		b := base
		if r.Base != nil {
			b = r.Base
		}
		if b != nil && b.Rate() > 0 {
			ratio = fmt.Sprintf("%.0f%%", 100*r.Rate()/b.Rate())
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Name, r.Concurrency, r.Rate(), ratio,
			dur(r.Percentile(50)), dur(r.Percentile(99)), dur(r.Percentile(99.9)), errString(r), r.Note)
	}
	tw.Flush()
}

func errString(r *Result) string {
	if len(r.Errors) == 0 {
		return "0"
	}
	var parts []string
	for k, v := range r.Errors {
		parts = append(parts, fmt.Sprintf("%d×%s", v, k))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// RSS returns a process's resident memory in bytes, from /proc.
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// MaxRSS samples a process's RSS every 20ms until stop is closed and returns
// the largest value seen.
func MaxRSS(pid int, stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var peak int64
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := RSS(pid); err == nil && v > peak {
				peak = v
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// MB formats bytes as MB.
func MB(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }
