package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// signReason sorts failed signatures by what an operator does about them.
func TestSignReason(t *testing.T) {
	for err, want := range map[error]string{
		&tokenerr.TokenError{Op: "log in", Kind: tokenerr.ErrPINLocked}:    "pin_locked",
		&tokenerr.TokenError{Op: "log in", Kind: tokenerr.ErrPINIncorrect}: "pin",
		fmt.Errorf("sign: %w", tokenerr.ErrPINMissing):                     "pin",
		&tokenerr.TokenError{Op: "sign", Kind: tokenerr.ErrTokenTimeout}:   "timeout",
		fmt.Errorf("sign: %w", context.DeadlineExceeded):                   "timeout",
		&tokenerr.TokenError{Op: "sign", Kind: tokenerr.ErrDeviceRemoved}:  "device",
		&tokenerr.TokenError{Op: "sign", Kind: tokenerr.ErrDeviceError}:    "device",
		errors.New("the mechanism is not supported"):                       "other",
	} {
		if got := signReason(err); got != want {
			t.Errorf("%v: %s, want %s", err, got, want)
		}
	}
}

// TestDependencyGauges: signagent_store_up while a store is seen, and
// signagent_dependency_up for each dependency seen, from the fixed set
// only (a name outside it is not exported).
func TestDependencyGauges(t *testing.T) {
	m := New(nil, Build{Version: "test"}, nil, Probes{})
	seen := map[string]bool{DependencyStore: false, DependencyIdP: true, "someone-else": true}
	m.Dependencies(func() map[string]bool { return seen })
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{"\nsignagent_store_up 0\n", "\nsignagent_dependency_up{dependency=\"store\"} 0\n", "\nsignagent_dependency_up{dependency=\"idp\"} 1\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("no %q in:\n%s", strings.TrimSpace(want), body)
		}
	}
	if strings.Contains(body, "someone-else") || strings.Contains(body, `dependency="service"`) {
		t.Errorf("a dependency not in the set, or not seen, is exported:\n%s", body)
	}
	delete(seen, DependencyStore)
	rec = httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if strings.Contains(rec.Body.String(), "signagent_store_up") {
		t.Error("signagent_store_up without a store seen")
	}
}

// TestServiceDate: the skew is measured as httpx.ClockSkew measures it
// (this machine's clock taken to the whole second), absent before an
// answer with a Date, kept through an unreadable one, and recorded
// without allocating while answers bring the Date header last parsed.
func TestServiceDate(t *testing.T) {
	m := New(nil, Build{Version: "test"}, nil, Probes{})
	skew := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if v, ok := strings.CutPrefix(l, "signagent_service_clock_skew_seconds "); ok {
				return v
			}
		}
		return "absent"
	}
	m.ServiceDate("", time.Now())
	if s := skew(); s != "absent" {
		t.Fatalf("without a Date: %s", s)
	}
	date := "Mon, 30 Nov 2026 10:00:00 GMT"
	at := time.Date(2026, 11, 30, 10, 0, 7, 900e6, time.UTC)
	m.ServiceDate(date, at)
	if s := skew(); s != "-7" {
		t.Fatalf("an answer 7.9 s after its Date: %s, want -7", s)
	}
	m.ServiceDate("not a date", at)
	if s := skew(); s != "-7" {
		t.Fatalf("after an unreadable Date: %s, want -7", s)
	}
	if n := testing.AllocsPerRun(100, func() { m.ServiceDate(date, at.Add(-5*time.Second)) }); n != 0 {
		t.Fatalf("%v allocations per answer with the same Date", n)
	}
	if s := skew(); s != "-2" {
		t.Fatalf("%s, want -2", s)
	}
	m.ServiceDate("Mon, 30 Nov 2026 10:00:09 GMT", at)
	if s := skew(); s != "2" {
		t.Fatalf("a later Date: %s, want 2", s)
	}
}
