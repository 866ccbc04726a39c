package agent_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/signagent/signagent/agent"
)

// TestBearerFileBeforeSocket: a caller that waits for the Unix socket to
// appear and then reads the bearer token file must find the file there
// (a script doing just that failed in CI when the TCP listener, and with it
// the bearer file, came after the Unix socket). The kernel's own record of
// the directory's changes (inotify) gives the order, with no timing in it.
func TestBearerFileBeforeSocket(t *testing.T) {
	cfg, _ := daemonConfig(t)
	sock := strings.TrimPrefix(cfg.Listen[0], "unix:")
	dir := filepath.Dir(sock)
	cfg.BearerTokenFile = filepath.Join(dir, "bearer")
	cfg.Listen = append(cfg.Listen, "tcp:127.0.0.1:0")

	t.Run("a new bearer file is in place before the socket", func(t *testing.T) {
		names := watch(t, dir, func() {
			d, err := agent.Start(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			d.Shutdown(context.Background())
		})
		bearer, socket := index(names, "bearer"), index(names, "a.sock")
		if bearer < 0 || socket < 0 || bearer > socket {
			t.Fatalf("the directory saw %q: want the bearer file before the socket", names)
		}
	})

	t.Run("a bad bearer file stops Start before any socket", func(t *testing.T) {
		if err := os.Chmod(cfg.BearerTokenFile, 0o644); err != nil {
			t.Fatal(err)
		}
		names := watch(t, dir, func() {
			if d, err := agent.Start(context.Background(), cfg); err == nil {
				d.Shutdown(context.Background())
				t.Fatal("Start succeeded with a world-readable bearer file")
			}
		})
		if index(names, "a.sock") >= 0 {
			t.Fatalf("the directory saw %q: a socket was made before the bearer file was refused", names)
		}
	})
}

// watch returns the names created in or moved into dir while f ran, in the
// order the kernel saw them.
func watch(t *testing.T, dir string, f func()) []string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	f()
	var names []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EAGAIN {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			names = append(names, string(bytes.TrimRight(name, "\x00")))
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

func index(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}
