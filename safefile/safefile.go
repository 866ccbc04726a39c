// Package safefile writes a command's output files so that nothing is
// clobbered and nothing is left half-written: a regular file (or a new
// path) is replaced atomically through a temporary file and a rename; a
// character device or FIFO the user named (/dev/stdout, a pipe) is written
// in place, never renamed over; a symlink is followed only to a regular
// file the user may write; anything else is refused before any work is
// done. Several outputs of one command land together or not at all.
package safefile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrRefused is returned for an output path that will not be written.
var ErrRefused = errors.New("refusing to write there")

// Out is a checked output path.
type Out struct {
	Path   string // as the user gave it
	target string // the file to replace (a symlink's target)
	direct bool   // a device or FIFO: written in place
	mode   os.FileMode
}

// Check looks at path now, before any work is done, and says how it would
// be written (mode for a file it creates or replaces).
func Check(path string, mode os.FileMode) (*Out, error) {
	o := &Out{Path: path, target: path, mode: mode}
	lst, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return o, checkDir(path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrRefused, path, err)
	}
	st, err := os.Stat(path) // follows a symlink
	if err != nil {
		return nil, fmt.Errorf("%w: %s is a symlink to nothing (%v)", ErrRefused, path, errors.Unwrap(err))
	}
	switch m := st.Mode(); {
	case m&os.ModeCharDevice != 0 || m&os.ModeNamedPipe != 0:
		o.direct = true
		return o, nil
	case m.IsRegular() && lst.Mode()&os.ModeSymlink != 0 && isStdio(path):
		// /dev/stdout of a shell's `> file`: write to what the shell
		// opened, not to a new file renamed over it.
		o.direct = true
		return o, nil
	case m.IsRegular():
		if lst.Mode()&os.ModeSymlink != 0 {
			if err := unix.Access(path, unix.W_OK); err != nil {
				return nil, fmt.Errorf("%w: %s is a symlink to a file you may not write", ErrRefused, path)
			}
			if o.target, err = filepath.EvalSymlinks(path); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrRefused, path, err)
			}
		}
		return o, checkDir(o.target)
	case m.IsDir():
		return nil, fmt.Errorf("%w: %s is a directory", ErrRefused, path)
	case m&os.ModeDevice != 0:
		return nil, fmt.Errorf("%w: %s is a block device", ErrRefused, path)
	}
	return nil, fmt.Errorf("%w: %s is neither a regular file, a character device nor a FIFO", ErrRefused, path)
}

// isStdio reports whether path names a descriptor of this process
// (/dev/stdout, /dev/fd/N, /proc/self/fd/N).
func isStdio(path string) bool {
	for _, p := range []string{"/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/self/fd/"} {
		if path == p || (p[len(p)-1] == '/' && len(path) > len(p) && path[:len(p)] == p) {
			return true
		}
	}
	return false
}

func checkDir(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return fmt.Errorf("%w: the directory %s does not exist", ErrRefused, dir)
	}
	return nil
}

// WriteAll writes data[i] to outs[i]. Files are first written whole to
// temporary files beside them; only when all are written are they renamed
// into place, then devices and FIFOs are written. If any step before the
// renames fails, no output has changed.
func WriteAll(outs []*Out, data [][]byte) error {
	if len(outs) != len(data) {
		return errors.New("safefile: one datum per output")
	}
	temps := make([]string, len(outs))
	defer func() {
		for _, t := range temps {
			if t != "" {
				os.Remove(t)
			}
		}
	}()
	for i, o := range outs {
		if o.direct {
			continue
		}
		t, err := writeTemp(o.target, data[i], o.mode)
		if err != nil {
			return fmt.Errorf("could not write %s: %w", o.Path, err)
		}
		temps[i] = t
	}
	for i, o := range outs {
		if o.direct {
			continue
		}
		if err := os.Rename(temps[i], o.target); err != nil {
			return fmt.Errorf("could not write %s: %w", o.Path, err)
		}
		temps[i] = ""
	}
	for i, o := range outs {
		if o.direct {
			if err := writeDirect(o.Path, data[i]); err != nil {
				return fmt.Errorf("could not write %s: %w", o.Path, err)
			}
		}
	}
	return nil
}

// Write checks path and writes data to it (see the package comment).
func Write(path string, data []byte, mode os.FileMode) error {
	o, err := Check(path, mode)
	if err != nil {
		return err
	}
	return WriteAll([]*Out{o}, [][]byte{data})
}

func writeTemp(target string, data []byte, mode os.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".tmp*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

// writeDirect writes to a device or FIFO without creating or truncating
// anything. A FIFO with no reader is an error rather than a hang.
func writeDirect(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ENXIO) {
		return fmt.Errorf("%s is a FIFO that nobody reads", path)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { syscall.SetNonblock(int(fd), false) })
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Close()
}
