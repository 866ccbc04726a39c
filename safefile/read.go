package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
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
// its mode or owner lets others at it (secretMode): forbidden is 0o007
// for a PIN, API key or password file, 0o077 for a store key, which must
// also be owned by root or this process's user.
func ReadSecret(path string, max int64, forbidden os.FileMode) ([]byte, error) {
	return read(path, max, forbidden|0o007)
}

// CheckSecret refuses the secret file path, as ReadSecret would, without
// reading it (a TLS key another library reads); a file that cannot be
// looked at passes: reading it says what is wrong.
func CheckSecret(path string, forbidden os.FileMode) error {
	st, err := os.Stat(path)
	if err != nil {
		return nil
	}
	sys := st.Sys().(*syscall.Stat_t)
	if why := secretMode(path, st.Mode().Perm(), sys.Uid, sys.Gid, forbidden|0o007, os.Geteuid(), os.Getegid()); why != "" {
		return fmt.Errorf("%w: %s", ErrSecretMode, why)
	}
	return nil
}

// secretMode says why the secret file path, of mode perm and owned by
// uid:gid, may not be used by a process running as euid:egid with the
// forbidden bits (0o007 or 0o077), or "" when it may: one line naming the
// file, its mode and the chmod (or chown) that fixes it.
//
// Every secret file: nothing for others, and its group may neither write
// nor run it (whoever may write a PIN file chooses the PIN the agent
// sends). Its group may read it only when root owns it, as ssh accepts
// for its keys: root, not the agent's user, then decides who is in the
// group. That is what a Kubernetes Secret volume gives (files of root,
// mode 0440 and group fsGroup) and what "install -o root -g signagent -m
// 0440" gives a system service.
//
// A store key (0o077 forbidden: it seals every session of every agent on
// the store) must also be owned by root or by the process's user: the
// owner can replace it, and a key someone else chose opens everything
// sealed with it. Its group, when it may read it, must be the process's
// effective gid, not a supplementary one: the systemd unit's
// supplementary group, signagent-clients, holds the agent's callers. Gid 0
// never counts as the agent's own: OpenShift runs every container of
// every pod with it, and any process of root's group could read the file.
func secretMode(path string, perm os.FileMode, uid, gid uint32, forbidden os.FileMode, euid, egid int) string {
	// The group a store key's group read is for: the process's own.
	groupOK := forbidden&0o070 == 0 || (egid != 0 && int(gid) == egid)
	groupRead := uid == 0 && groupOK && perm&0o040 != 0 // may stay
	var fix []string                                    // the one chmod that makes the mode right
	switch {
	case perm&0o070 != 0 && !groupRead:
		fix = append(fix, "g-rwx")
	case perm&0o030 != 0:
		fix = append(fix, "g-wx")
	}
	if perm&0o007 != 0 {
		fix = append(fix, "o-rwx")
	}
	chmod := "chmod " + strings.Join(fix, ",") + " " + path
	if len(fix) == 2 && fix[0] == "g-rwx" {
		chmod = "chmod go-rwx " + path
	}
	switch {
	case perm&0o007 != 0:
		return fmt.Sprintf("%s has mode %04o; run %s", path, perm, chmod)
	case perm&0o030 != 0:
		return fmt.Sprintf("%s has mode %04o: its group may write or execute it; run %s", path, perm, chmod)
	case perm&0o040 != 0 && uid != 0:
		return fmt.Sprintf("%s has mode %04o: a group-readable secret file must be owned by root; run %s", path, perm, chmod)
	case perm&0o040 != 0 && !groupRead:
		return fmt.Sprintf("%s has mode %04o and group %d, not this process's own group (gid %d); run %s", path, perm, gid, egid, chmod)
	case forbidden&0o070 != 0 && uid != 0 && int(uid) != euid:
		return fmt.Sprintf("%s is owned by uid %d, neither root nor this process's user (uid %d); run chown %d %s", path, uid, euid, euid, path)
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
