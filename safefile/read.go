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
// or write, or (a store key) one that someone other than root or this
// process's user owns.
var ErrSecretMode = errors.New("a secret file is open to others")

// Read reads a regular file (a symlink to one is followed) of at most max
// bytes. A directory, FIFO or device (/dev/zero) is refused before it is
// read, so that a wrong path neither hangs nor fills memory.
func Read(path string, max int64) ([]byte, error) {
	return read(path, max, 0)
}

// ReadSecret reads a file holding a secret as Read does, refusing it when
// its mode has any of the forbidden permission bits: 0o007 (others) for a
// PIN or API key file, 0o077 (group and others) for a store key, with the
// one exception secretMode allows.
func ReadSecret(path string, max int64, forbidden os.FileMode) ([]byte, error) {
	return read(path, max, forbidden|0o007)
}

// secretMode says why the secret file path, of mode perm and owned by
// uid:gid, may not be used by a process running as euid:egid with the
// forbidden bits (0o007 or 0o077), or "" when it may.
//
// A file closed to the group (0o077 forbidden: the store key, which seals
// every session of every agent on the store) must also be owned by root
// or by the process's user: the owner can replace it, and a key someone
// else chose opens everything sealed with it. Such a file may still be
// readable by its group, as ssh accepts a root-owned file, when nothing
// but root, the owner and the process's own group can read it: owned by
// root or the process's user, group read and nothing else (0o040, never
// group write), and the group the process's effective gid. That is what a
// Kubernetes Secret volume gives: files of root, mode 0440 and group
// fsGroup, which the pod runs as (runAsGroup); and what
// "install -o root -g signagent -m 0440" gives a system service. The
// group must be the effective one, not a supplementary one: the systemd
// unit's supplementary group, signagent-clients, holds the agent's
// callers. Gid 0 never counts as the agent's own: OpenShift runs every
// container of every pod with it, and any process of root's group could
// read the file.
func secretMode(path string, perm os.FileMode, uid, gid uint32, forbidden os.FileMode, euid, egid int) string {
	if forbidden&0o070 == 0 {
		if perm&forbidden != 0 {
			return fmt.Sprintf("%s has mode %04o; run chmod o-rwx %s", path, perm, path)
		}
		return ""
	}
	switch {
	case perm&0o037 != 0:
		return fmt.Sprintf("%s has mode %04o; run chmod go-rwx %s", path, perm, path)
	case uid != 0 && int(uid) != euid:
		return fmt.Sprintf("%s is owned by uid %d, neither root nor this process's user (uid %d); run chown %d %s", path, uid, euid, euid, path)
	case perm&0o040 != 0 && (egid == 0 || int(gid) != egid):
		return fmt.Sprintf("%s has mode %04o and group %d, not this process's own group (gid %d); run chmod go-rwx %s", path, perm, gid, egid, path)
	}
	return ""
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
	if forbidden != 0 {
		sys := st.Sys().(*syscall.Stat_t)
		if why := secretMode(path, st.Mode().Perm(), sys.Uid, sys.Gid, forbidden, os.Geteuid(), os.Getegid()); why != "" {
			return nil, fmt.Errorf("%w: %s", ErrSecretMode, why)
		}
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
