package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrInput marks an input file that cannot be used: not a regular file, or
// larger than the reader allows.
var ErrInput = errors.New("not a usable input file")

// ErrSecretMode marks a file holding a secret that other users may read
// or write.
var ErrSecretMode = errors.New("a secret file is accessible to every user")

// Read reads a regular file (a symlink to one is followed) of at most max
// bytes. A directory, FIFO or device (/dev/zero) is refused before it is
// read, so that a wrong path neither hangs nor fills memory.
func Read(path string, max int64) ([]byte, error) {
	return read(path, max, 0)
}

// ReadSecret reads a file holding a secret as Read does, refusing it when
// its mode has any of the forbidden permission bits: 0o007 (others) for a
// PIN or API key file, 0o077 (group and others) for a store key.
func ReadSecret(path string, max int64, forbidden os.FileMode) ([]byte, error) {
	return read(path, max, forbidden|0o007)
}

func read(path string, max int64, forbidden os.FileMode) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("could not read %s: %w", path, errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("could not read %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is %s, not a regular file", ErrInput, path, fileKind(st.Mode()))
	}
	if perm := st.Mode().Perm(); forbidden != 0 && perm&forbidden != 0 {
		who := "o"
		if forbidden&0o070 != 0 {
			who = "go"
		}
		return nil, fmt.Errorf("%w: %s has mode %04o; run chmod %s-rwx %s", ErrSecretMode, path, perm, who, path)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%w: %s holds %d bytes, more than the %d it may", ErrInput, path, st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("could not read %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s holds more than the %d bytes it may", ErrInput, path, max)
	}
	return b, nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}
