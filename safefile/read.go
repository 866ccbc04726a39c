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

// Read reads a regular file (a symlink to one is followed) of at most max
// bytes. A directory, FIFO or device (/dev/zero) is refused before it is
// read, so that a wrong path neither hangs nor fills memory.
func Read(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrInput, path)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%w: %s holds %d bytes, more than the %d it may", ErrInput, path, st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%w: %s holds more than %d bytes", ErrInput, path, max)
	}
	return b, err
}
