package listen

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/signagent/signagent/errdefs"
)

// notWritable turns a failure to make the socket's directory or to bind
// the socket in it into the one line an operator can act on, when the
// cause is that this user may not write there (EACCES, EPERM) or the
// directory is on a read-only file system (EROFS: a container's read-only
// root without a volume there). A container's run directory bind-mounted
// from the host comes root-owned unless it was made for the agent's user:
// "bind: permission denied" names neither the directory nor the fix.
// Other errors are returned unchanged.
func notWritable(dir string, err error) error {
	switch {
	case errors.Is(err, syscall.EROFS):
		return errdefs.Mark(fmt.Errorf("cannot create the agent's socket in %s: it is on a read-only file system; mount a directory there that uid %d may write (in a container, a volume), or choose another --listen path", dir, os.Geteuid()), errdefs.ErrInvalidInput)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		uid := os.Geteuid()
		if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
			return errdefs.Mark(fmt.Errorf("cannot create the agent's socket directory %s: its parent is not writable by uid %d; make it for uid %d (install -d -o %d -m 0700 %s), or choose another --listen path", dir, uid, uid, uid, dir), errdefs.ErrInvalidInput)
		}
		return errdefs.Mark(fmt.Errorf("cannot create the agent's socket in %s: the directory is not writable by uid %d; give %s to uid %d (chown %d %s), or choose another --listen path", dir, uid, dir, uid, uid, dir), errdefs.ErrInvalidInput)
	}
	return err
}
