package agentclient

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FromEnv finds the agent as ssh clients find ssh-agent, and says which
// of the three ways it is missing.
func TestFromEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(SocketEnv, "")
	if _, err := FromEnv(); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("unset: %v", err)
	}
	t.Setenv(SocketEnv, filepath.Join(dir, "gone.sock"))
	if _, err := FromEnv(); !errors.Is(err, ErrNoSocket) || !strings.Contains(err.Error(), "nothing is there") {
		t.Fatalf("nothing there: %v", err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	t.Setenv(SocketEnv, file)
	if _, err := FromEnv(); !errors.Is(err, ErrNoSocket) || !strings.Contains(err.Error(), SocketEnv+"="+file+": it is not a socket") {
		t.Fatalf("not a socket: %v", err)
	}
	sock := filepath.Join(dir, "a.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv(SocketEnv, sock)
	if c, err := FromEnv(); err != nil || c == nil {
		t.Fatalf("a socket: %v", err)
	}
}
