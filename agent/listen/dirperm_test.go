package listen

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/signagent/signagent/errdefs"
)

// TestNotWritableLine: the error an operator sees for a run directory the
// agent's user may not write (a container's bind mount made by root) is
// one line naming the directory and the chown that fixes it, of the kind
// bad input (exit 2), for EACCES, EPERM and EROFS alike; any other error
// is left as it was.
func TestNotWritableLine(t *testing.T) {
	dir := t.TempDir()
	uid := os.Geteuid()
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"EACCES", &os.SyscallError{Syscall: "bind", Err: syscall.EACCES}, []string{dir, fmt.Sprintf("not writable by uid %d", uid), fmt.Sprintf("give %s to uid %d (chown %d %s)", dir, uid, uid, dir)}},
		{"EPERM", &os.PathError{Op: "mkdir", Path: dir, Err: syscall.EPERM}, []string{fmt.Sprintf("(chown %d %s)", uid, dir)}},
		{"EROFS", &os.SyscallError{Syscall: "bind", Err: syscall.EROFS}, []string{dir, "read-only file system", "volume"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := notWritable(dir, tc.err)
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q lacks %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") || strings.Contains(msg, "permission denied") {
				t.Errorf("not one plain line: %q", msg)
			}
			if !errors.Is(err, errdefs.ErrInvalidInput) {
				t.Errorf("%q is not of the kind bad input", msg)
			}
		})
	}
	missing := filepath.Join(dir, "sub")
	if msg := notWritable(missing, syscall.EACCES).Error(); !strings.Contains(msg, fmt.Sprintf("install -d -o %d -m 0700 %s", uid, missing)) {
		t.Errorf("a directory that does not exist: %q, want the install -d that makes it", msg)
	}
	other := errors.New("address already in use")
	if got := notWritable(dir, other); got != other {
		t.Errorf("another error became %v", got)
	}
}

// TestListenUnixRootOwnedDir runs ListenUnix as another user (uid 65532,
// the image's) on a directory root owns, as a container's bind mount
// made by the engine is: the real bind(2) fails, and the error is the
// line naming the directory. It needs root to change user; as anyone
// else, the process itself is the non-root one and a directory closed to
// it stands in (mode 0500, its own: the same EACCES).
func TestListenUnixRootOwnedDir(t *testing.T) {
	if os.Getenv("LISTEN_HELPER_SOCK") != "" {
		_, err := ListenUnix(UnixSocket{Path: os.Getenv("LISTEN_HELPER_SOCK")})
		fmt.Print(err)
		os.Exit(0)
	}
	top := t.TempDir()
	dir := filepath.Join(top, "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	uid := 65532
	bin := os.Args[0]
	if os.Geteuid() == 0 {
		// The other user must reach the test binary and the directory.
		bin = filepath.Join(top, "listen.test")
		b, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		for d := top; d != "/"; d = filepath.Dir(d) {
			if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o005 != 0o005 {
				if err := os.Chmod(d, st.Mode().Perm()|0o005); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	cmd := exec.Command(bin, "-test.run=^TestListenUnixRootOwnedDir$")
	cmd.Env = append(os.Environ(), "LISTEN_HELPER_SOCK="+filepath.Join(dir, "agent.sock"))
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	} else {
		uid = os.Geteuid()
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	msg := string(out)
	want := fmt.Sprintf("give %s to uid %d (chown %d %s)", dir, uid, uid, dir)
	if !strings.Contains(msg, want) || strings.Contains(msg, "bind:") {
		t.Errorf("ListenUnix in a directory uid %d may not write: %q, want it to say %q", uid, msg, want)
	}
}
