package listen

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// UnixSocket describes a Unix socket to create.
type UnixSocket struct {
	Path string
	// Group, when set, owns the socket, which is then mode 0660 instead of 0600.
	Group int
	// HasGroup says Group is set (gid 0 is a valid group).
	HasGroup bool
}

// ListenUnix creates the socket with mode 0600 (0660 with a group). A stale
// socket file left by a crashed agent of the same user is replaced: one
// that refuses connections (ECONNREFUSED: nobody listens on it) and that
// this user owns. Anything else (another agent answers, the socket is
// another user's, the connect failed for another reason such as EACCES or
// a full backlog) is an error, and the file is left alone.
func ListenUnix(s UnixSocket) (net.Listener, error) {
	dir := filepath.Dir(s.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		if e := notWritable(dir, err); e != err {
			return nil, e
		}
		return nil, fmt.Errorf("could not create the socket's directory: %w", err)
	}
	if st, err := os.Lstat(s.Path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; remove it or choose another path", s.Path)
		}
		if err := staleSocket(s.Path, st); err != nil {
			return nil, err
		}
		os.Remove(s.Path)
	}
	// The socket is created with no permissions for others from the start:
	// there is no moment at which another user could connect. It is made
	// under a temporary name and linked to its path once it listens with
	// its final owner and mode, so that a caller who sees the path never
	// meets a socket that is bound but not yet listening (ECONNREFUSED)
	// or not yet its group's; the link fails rather than replace a socket
	// another process put there meanwhile.
	tmp := filepath.Join(dir, fmt.Sprintf(".sa%d", os.Getpid())) // no longer than most socket names: the path limit
	os.Remove(tmp)
	old := umask(0o177)
	l, err := net.Listen("unix", tmp)
	umask(old)
	if err != nil {
		if e := notWritable(dir, err); e != err {
			return nil, e
		}
		return nil, fmt.Errorf("could not listen on %s: %w", s.Path, err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	defer os.Remove(tmp)
	mode := os.FileMode(0o600)
	if s.HasGroup {
		if err := os.Chown(tmp, -1, s.Group); err != nil {
			l.Close()
			return nil, fmt.Errorf("could not give the socket to group %d: %w", s.Group, err)
		}
		mode = 0o660
	}
	if err := os.Chmod(tmp, mode); err != nil {
		l.Close()
		return nil, err
	}
	if err := os.Link(tmp, s.Path); err != nil {
		l.Close()
		return nil, fmt.Errorf("could not put the socket at %s: %w", s.Path, err)
	}
	ul := &unixListener{Listener: Limit(l, DefaultMaxConnsUnix), path: s.Path}
	if st, err := os.Lstat(s.Path); err == nil {
		ul.id = fileID(st)
	}
	return ul, nil
}

// unixListener is a socket this process created; it remembers which file
// that was, so that it removes its own socket and never one that another
// process put at the same path since.
type unixListener struct {
	net.Listener
	path string
	id   [2]uint64 // device and inode
}

// Addr is the socket's path (it was bound under a temporary name).
func (u *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: u.path, Net: "unix"} }

// RemoveSocket removes the socket file of l, a listener ListenUnix made,
// if it is still the one created there (never one that another process
// put at the same path since); it does nothing to any other listener.
func RemoveSocket(l net.Listener) {
	if u, ok := l.(*unixListener); ok {
		u.remove()
	}
}

func (u *unixListener) remove() {
	if st, err := os.Lstat(u.path); err == nil && fileID(st) == u.id {
		os.Remove(u.path)
	}
}

func fileID(st os.FileInfo) [2]uint64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return [2]uint64{uint64(sys.Dev), sys.Ino}
	}
	return [2]uint64{}
}

// staleSocket returns nil when the socket at path is a dead one of ours.
func staleSocket(path string, st os.FileInfo) error {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("another agent is already serving on %s", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s is a socket that may be in use (connecting to it failed: %v); not replacing it: stop the agent that owns it or choose another path", path, errors.Unwrap(errors.Unwrap(err)))
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("%s is a dead socket of another user; not replacing it: remove it or choose another path", path)
	}
	return nil
}

func umask(m int) int { return unix.Umask(m) }
