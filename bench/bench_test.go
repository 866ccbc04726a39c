package bench

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestPercentilesAndRate(t *testing.T) {
	r := &Result{Elapsed: 2 * time.Second}
	for i := 1; i <= 100; i++ {
		r.lat = append(r.lat, time.Duration(i)*time.Millisecond)
	}
	if r.Rate() != 50 {
		t.Fatalf("rate %v", r.Rate())
	}
	for p, want := range map[float64]time.Duration{50: 50 * time.Millisecond, 99: 99 * time.Millisecond, 99.9: 100 * time.Millisecond, 0: time.Millisecond} {
		if got := r.Percentile(p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if (&Result{}).Percentile(50) != 0 || (&Result{}).Rate() != 0 {
		t.Fatal("empty result")
	}
}

func TestRunCountsErrorsApart(t *testing.T) {
	n := 0
	r := Run("x", 1, 50*time.Millisecond, func(context.Context) string {
		n++
		if n%2 == 0 {
			return "429"
		}
		time.Sleep(time.Millisecond)
		return ""
	})
	if r.Errors["429"] == 0 || len(r.lat) == 0 || r.ErrorCount() != r.Errors["429"] || r.Ops != len(r.lat)+r.ErrorCount() {
		t.Fatalf("%+v", r)
	}
}

func TestTableRatios(t *testing.T) {
	base := &Result{Name: "raw", Concurrency: 1, Elapsed: time.Second, lat: make([]time.Duration, 100)}
	half := &Result{Name: "agent", Concurrency: 8, Elapsed: time.Second, lat: make([]time.Duration, 50), Errors: map[string]int{"429": 3}}
	other := &Result{Name: "vs other base", Concurrency: 2, Elapsed: time.Second, lat: make([]time.Duration, 50), Base: half}
	var b strings.Builder
	Table(&b, []*Result{base, half, other, {Name: "memory", Value: "12.0 MB", Note: "target"}}, base)
	out := b.String()
	for _, want := range []string{`raw +1 +100 +100%`, `agent +8 +50 +50% .* 3×429`, `vs other base +2 +50 +100%`, `memory +12\.0 MB +target`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
