package auditlog

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFileBatches: lines reach the file without Close or Flush,
// flushEvery after the first of a batch, all of a quick burst with
// one write; a burst after that is written too (the writer is woken
// again), and Close writes what is pending at once.
func TestFileBatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := func() int {
		b, _ := os.ReadFile(path)
		return bytes.Count(b, []byte("\n"))
	}
	waitLines := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); lines() != n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d lines in the file, want %d", lines(), n)
			}
		}
	}
	start := time.Now()
	for range 100 {
		a.Write([]byte(`{"operation":"x"}` + "\n"))
	}
	// (Only when the burst took well under the batch's time: a loaded
	// machine may stall this goroutine longer.)
	if n := lines(); n != 0 && time.Since(start) < flushEvery/2 {
		t.Fatalf("%d lines written before the batch's time", n)
	}
	waitLines(100)
	a.Write([]byte(`{"operation":"y"}` + "\n"))
	waitLines(101)
	a.Write([]byte(`{"operation":"z"}` + "\n"))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := lines(); n != 102 {
		t.Fatalf("after Close: %d lines", n)
	}
}
