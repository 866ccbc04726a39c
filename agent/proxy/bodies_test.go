package proxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"testing"
	"testing/iotest"
)

// TestBodyBudget: bodies share one budget; one that does not fit is
// refused at once (by its Content-Length, or as it is read when the length
// is unknown); a large body is spooled to a file that is already unlinked,
// read back whole as often as asked; Close gives the budget back.
func TestBodyBudget(t *testing.T) {
	dir := t.TempDir()
	b := newBodyBudget(1 << 20)
	b.dir = dir
	big := make([]byte, 700<<10)
	rand.Read(big)

	h1, err := b.hold(bytes.NewReader(big), int64(len(big)))
	if err != nil {
		t.Fatal(err)
	}
	if h1.file == nil || h1.mem != nil {
		t.Fatalf("a %d-byte body should be spooled", len(big))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("the spool file is visible: %v", ents)
	}
	for range 2 { // the first attempt, then the retry after a 401
		got, _ := io.ReadAll(h1.reader())
		if !bytes.Equal(got, big) {
			t.Fatalf("spooled body read back as %d bytes", len(got))
		}
	}
	// 700 KiB held: a declared 400 KiB does not fit, nor does an unknown
	// length that grows past the rest.
	if _, err := b.hold(bytes.NewReader(big[:400<<10]), 400<<10); !errors.Is(err, ErrBusy) {
		t.Fatalf("over the budget by Content-Length: %v", err)
	}
	if _, err := b.hold(iotest.HalfReader(bytes.NewReader(big[:400<<10])), -1); !errors.Is(err, ErrBusy) {
		t.Fatalf("over the budget while read: %v", err)
	}
	small, err := b.hold(iotest.OneByteReader(bytes.NewReader([]byte("{}"))), -1)
	if err != nil || small.file != nil || string(small.mem) != "{}" {
		t.Fatalf("small body: %v %q", err, small.mem)
	}
	small.Close()
	h1.Close()
	// All given back: the whole budget can be taken again.
	if !b.sem.TryAcquire(1 << 20) {
		t.Fatal("the budget was not given back")
	}
}
