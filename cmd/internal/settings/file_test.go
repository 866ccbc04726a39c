package settings

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A settings file another user owns is refused, as ssh refuses such a
// configuration: that user could make every command sign with another key
// or send the API key elsewhere. Making a file another user's needs root
// (CI runs the tests as root).
func TestReadFileRefusesAnotherUsersFile(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte("token-label: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(p, "", true, nil); err != nil {
		t.Fatalf("root's own file: %v", err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(p, "", true, nil)
	if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "belongs to another user (uid 65534)") {
		t.Fatalf("another user's file: %v", err)
	}
}

// The chosen context's keys beat the top's; the top serves every context.
func TestReadFileContexts(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	body := "business-url: https://top.example\nspace: all\ncurrent-context: a\ncontexts:\n  a:\n    business-url: https://a.example\n  b: {}\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ctx, want string }{{"", "https://a.example"}, {"a", "https://a.example"}, {"b", "https://top.example"}} {
		f, err := ReadFile(p, tc.ctx, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := f.Value("business-url"); v != tc.want {
			t.Errorf("context %q: business-url %v, want %s", tc.ctx, v, tc.want)
		}
		if v, _ := f.Value("space"); v != "all" {
			t.Errorf("context %q: space %v, want the top's", tc.ctx, v)
		}
	}
	if f, _ := ReadFile(p, "b", true, nil); f.Where("business-url") != p+":1" {
		t.Errorf("where: %s", f.Where("business-url"))
	}
}

// Repeated and nested errors are named once, in one line.
func TestJoin(t *testing.T) {
	a, b := errors.New("a bad"), errors.New("b bad")
	err := Join(nil, a, errors.Join(b, a), Join(b))
	if err == nil || err.Error() != "a bad; b bad" || !errors.Is(err, b) {
		t.Fatalf("%v", err)
	}
	if Join(nil, Join()) != nil {
		t.Fatal("nothing joined is no error")
	}
}

// A path that is a directory, a FIFO or a link to one is refused in one
// line, at once: the FIFO is not waited on for a writer.
func TestReadFileNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open.yaml")
	os.WriteFile(open, []byte("token-label: x\n"), 0o644)
	os.Chmod(open, 0o644)
	for _, l := range []struct{ name, to string }{{"to-fifo", fifo}, {"to-dir", dir}, {"to-open", open}} {
		if err := os.Symlink(l.to, filepath.Join(dir, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{
		dir: "is not a regular file", fifo: "is not a regular file", filepath.Join(dir, "to-fifo"): "is not a regular file",
		filepath.Join(dir, "to-dir"): "is not a regular file", filepath.Join(dir, "to-open"): "every user may read it",
	} {
		done := make(chan error, 1)
		go func() {
			_, err := ReadFile(name, "", true, nil)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), name+" ") || !strings.Contains(err.Error(), want) ||
				strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: %v, want one line with %q", name, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: still reading after 5 s", name)
		}
	}
	// A link to a good file is followed, as before.
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("token-label: x\n"), 0o600)
	os.Symlink(good, filepath.Join(dir, "to-good"))
	if f, err := ReadFile(filepath.Join(dir, "to-good"), "", true, nil); err != nil {
		t.Fatal(err)
	} else if v, _ := f.Value("token-label"); v != "x" {
		t.Fatalf("token-label %v", v)
	}
}

// The settings read are those of the file whose owner and mode were
// checked: while the path is swapped, over and over, between a good file
// and one every user may write, no read ever returns the other file's
// settings (a check by path and a read by path again would, now and then).
func TestReadFileChecksWhatItReads(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	good, open := filepath.Join(dir, "good"), filepath.Join(dir, "open")
	os.WriteFile(good, []byte("business-url: https://good.example\n"), 0o600)
	os.WriteFile(open, []byte("business-url: https://planted.example\n"), 0o666)
	os.Chmod(open, 0o666)
	os.Link(good, p)
	stop := make(chan struct{})
	swapped := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				swapped <- nil
				return
			default:
			}
			src, tmp := good, filepath.Join(dir, "tmp")
			if i%2 == 1 {
				src = open
			}
			os.Remove(tmp) // left when the path already was src: rename does nothing then
			if err := os.Link(src, tmp); err != nil {
				swapped <- err
				return
			}
			if err := os.Rename(tmp, p); err != nil {
				swapped <- err
				return
			}
		}
	}()
	var reads, refused int
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		f, err := ReadFile(p, "", true, nil)
		if err != nil {
			if !strings.Contains(err.Error(), "has mode 0666: others may change it") {
				t.Fatalf("read %d: %v", reads, err)
			}
			refused++
			continue
		}
		reads++
		if v, _ := f.Value("business-url"); v != "https://good.example" {
			t.Fatalf("read %d (after %d refusals) returned %v: the file read is not the file checked", reads, refused, v)
		}
	}
	close(stop)
	if err := <-swapped; err != nil {
		t.Fatal(err)
	}
	if reads == 0 || refused == 0 {
		t.Fatalf("the swap was not seen: %d reads, %d refusals", reads, refused)
	}
	t.Logf("%d reads, %d refusals", reads, refused)
}

// readOpened checks and reads the file opened, not the one the path
// names by the time it looks.
func TestReadOpenedIsTheOpenedFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	write := func(path, body string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(path, mode)
	}
	write(p, "good: 1\n", 0o600)
	fd, _ := os.Open(p)
	defer fd.Close()
	write(filepath.Join(dir, "open"), "planted: 1\n", 0o666)
	os.Rename(filepath.Join(dir, "open"), p)
	if b, err := readOpened(fd, p); err != nil || string(b) != "good: 1\n" {
		t.Fatalf("%q %v", b, err)
	}
	fd2, _ := os.Open(p) // the open one now
	defer fd2.Close()
	write(filepath.Join(dir, "good"), "good: 1\n", 0o600)
	os.Rename(filepath.Join(dir, "good"), p)
	if b, err := readOpened(fd2, p); err == nil || !strings.Contains(err.Error(), "has mode 0666") {
		t.Fatalf("%q %v", b, err)
	}
}
