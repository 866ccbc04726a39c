package safefile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestKinds(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	os.WriteFile(regular, []byte("old"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(regular, link)
	dangling := filepath.Join(dir, "dangling")
	os.Symlink(filepath.Join(dir, "nothing"), dangling)
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o700)

	if err := Write(filepath.Join(dir, "new"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "new")); st.Mode().Perm() != 0o600 {
		t.Fatalf("new file mode %v", st.Mode())
	}
	if err := Write(regular, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(link, []byte("via link"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(regular); string(b) != "via link" {
		t.Fatalf("the link's target holds %q", b)
	}
	if st, _ := os.Lstat(link); st.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the symlink was replaced by a file")
	}
	for _, bad := range []string{dangling, sub, filepath.Join(dir, "missing", "x")} {
		if err := Write(bad, []byte("x"), 0o600); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: err = %v", bad, err)
		}
	}
	if _, err := os.Lstat(dangling); err != nil {
		t.Fatal("the dangling symlink was removed")
	}
}

func TestFIFOIsWrittenInPlace(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(fifo, []byte("x"), 0o600); err == nil {
		t.Fatal("wrote to a FIFO nobody reads")
	}
	got := make(chan string)
	go func() {
		f, _ := os.Open(fifo)
		b, _ := io.ReadAll(f)
		f.Close()
		got <- string(b)
	}()
	var err error
	for range 100 { // until the reader has opened its end
		if err = Write(fifo, []byte("through the pipe"), 0o600); err == nil {
			break
		}
		syscall.Nanosleep(&syscall.Timespec{Nsec: 10e6}, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "through the pipe" {
		t.Fatalf("read %q", s)
	}
	if st, _ := os.Lstat(fifo); st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatal("the FIFO was replaced")
	}
}

// TestCharDeviceIsNotReplaced: a character device node made by the test
// (a copy of /dev/null's numbers; root only) is written to, never renamed
// over.
func TestCharDeviceIsNotReplaced(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("making a device node needs root; CI runs as root")
	}
	dev := filepath.Join(t.TempDir(), "null")
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	if err := Write(dev, []byte("discarded"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(dev); st.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("the device node was replaced: %v", st.Mode())
	}
}

func TestAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	os.WriteFile(a, []byte("old a"), 0o600)
	oa, err := Check(a, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := Check(filepath.Join(dir, "sub", "b"), 0o600)
	if err == nil {
		t.Fatalf("checked a path in a missing directory: %+v", ob)
	}
	// The directory vanishes between the check and the write.
	sub := filepath.Join(dir, "sub2")
	os.Mkdir(sub, 0o700)
	ob, err = Check(filepath.Join(sub, "b"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(sub)
	if err := WriteAll([]*Out{oa, ob}, [][]byte{[]byte("new a"), []byte("b")}); err == nil {
		t.Fatal("wrote with one output impossible")
	}
	if b, _ := os.ReadFile(a); string(b) != "old a" {
		t.Fatalf("a changed to %q though b failed", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}

// Write replaces a file whole with the mode asked, and a failure leaves
// nothing behind.
func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret")
	if err := Write(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Fatalf("got %q", b)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	// A missing directory fails and leaves nothing behind.
	if err := Write(filepath.Join(dir, "missing", "x"), []byte("x"), 0o600); err == nil {
		t.Fatal("wrote into a missing directory")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}
