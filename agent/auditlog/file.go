// Package auditlog is the agent's audit log: what a line says (Entry,
// one JSON line per operation, written by Writer, never a secret), and
// the file on disk (File): appended to with mode 0600, never through a
// symlink nor into a file others may read, written in batches so that a
// request does not wait for the disk, and reopened for rotation.
package auditlog

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// File is the audit log on disk: appended to, mode 0600, reopened on
// SIGHUP so that it can be rotated (logrotate moves it, then signals).
//
// A request does not wait for the disk: its line is appended to a buffer
// in memory, and a writer goroutine writes whatever has gathered with one
// write(2) flushEvery after the first line of a batch (the line that
// finds the buffer empty wakes it; the others wake nobody). Nothing is
// lost on a shutdown: Reopen writes what is pending to the old file
// before it switches, Close (at shutdown, after the requests have
// finished) writes the rest, and a buffer past maxPending is written
// by the request that fills it, so that memory stays bounded when the
// disk is slow. Only a crash (SIGKILL, power) loses the lines of the
// last flushEvery.
type File struct {
	path string

	mu     sync.Mutex // guards buf and closed
	buf    []byte     // lines not yet written
	closed bool

	wmu   sync.Mutex // serializes writes to f and its replacement
	f     *os.File
	spare []byte // the buffer written last, reused

	wake chan struct{} // the writer has lines to write
	stop chan struct{}
	done chan struct{}
}

// maxPending bounds the lines held in memory.
const maxPending = 1 << 20

// flushEvery is how long a line waits for others to be written with:
// waking the writer for each line cost a goroutine hand-off and a write(2)
// per request (issue 26's profile), more than the rest of the audit.
const flushEvery = 50 * time.Millisecond

// Open opens (creating, 0600) the audit log at path. A symlink is
// not followed, and a file that is not regular, that another user owns, or
// that every user may read or write is refused: the audit log says who
// used the key.
func Open(path string) (*File, error) {
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	a := &File{path: path, f: f, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go a.writer()
	return a, nil
}

// writer writes the pending lines flushEvery after it is woken, and
// once more when stopped.
func (a *File) writer() {
	defer close(a.done)
	t := time.NewTimer(flushEvery)
	t.Stop()
	for {
		select {
		case <-a.wake:
		case <-a.stop:
			a.Flush()
			return
		}
		t.Reset(flushEvery)
		select {
		case <-t.C:
			a.Flush()
		case <-a.stop:
			a.Flush()
			return
		}
	}
}

func openFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("the audit log %s is a symlink; give the file itself", path)
	}
	if err != nil {
		return nil, fmt.Errorf("could not open the audit log: %w", err)
	}
	st, err := f.Stat()
	if err == nil {
		err = checkFile(path, st)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Check refuses the audit log at path as Open would, without opening or
// making it (signagent doctor): an error wrapping os.ErrNotExist when it
// is not there, which Open makes.
func Check(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err != nil {
		return fmt.Errorf("could not open the audit log: %w", err)
	}
	if st.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("the audit log %s is a symlink; give the file itself", path)
	}
	return checkFile(path, st)
}

// checkFile refuses an audit log that is not a regular file, that every
// user may read or write, or that another user owns.
func checkFile(path string, st os.FileInfo) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("the audit log %s is not a regular file", path)
	}
	if st.Mode().Perm()&0o007 != 0 {
		return fmt.Errorf("the audit log %s has mode %04o; run chmod o-rwx %s", path, st.Mode().Perm(), path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("the audit log %s belongs to uid %d, not to this user", path, sys.Uid)
	}
	return nil
}

// Write queues one line for the writer; it waits for the disk only when
// maxPending bytes are already waiting.
func (a *File) Write(p []byte) (int, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return 0, os.ErrClosed
	}
	first := len(a.buf) == 0
	a.buf = append(a.buf, p...)
	full := len(a.buf) >= maxPending
	a.mu.Unlock()
	if full {
		return len(p), a.Flush()
	}
	if first {
		select {
		case a.wake <- struct{}{}:
		default: // the writer is already woken
		}
	}
	return len(p), nil
}

// Flush writes the pending lines now.
func (a *File) Flush() error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return a.flushLocked()
}

func (a *File) flushLocked() error {
	a.mu.Lock()
	b := a.buf
	a.buf = a.spare[:0]
	a.mu.Unlock()
	a.spare = b[:0]
	if len(b) == 0 {
		return nil
	}
	_, err := a.f.Write(b)
	return err
}

// Reopen opens the path again (a rotated log starts anew) and closes the
// old file, after writing to it what was pending. On an error the old file
// is kept.
func (a *File) Reopen() error {
	f, err := openFile(a.path)
	if err != nil {
		return err
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.flushLocked()
	old := a.f
	a.f = f
	return old.Close()
}

// Close writes what is pending and closes the file; later lines are
// refused (os.ErrClosed).
func (a *File) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	close(a.stop)
	<-a.done
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return a.f.Close()
}
