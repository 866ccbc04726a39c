package agentclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// listenEnv makes the test binary a listener on the socket it names (see
// TestMain), run as another user by TestAnotherUsersAgentRefused.
const listenEnv = "AGENTCLIENT_TEST_LISTEN"

func TestMain(m *testing.M) {
	if sock := os.Getenv(listenEnv); sock != "" {
		os.Exit(listen(sock))
	}
	os.Exit(m.Run())
}

// listen listens on sock, says "ready", then takes connections one at a
// time and says for each how many bytes it sent before closing it, until
// it is killed.
func listen(sock string) int {
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer l.Close()
	fmt.Println("ready")
	for {
		c, err := l.Accept()
		if err != nil {
			fmt.Println(err)
			return 1
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		fmt.Printf("received %d bytes\n", n)
	}
}

// The decision alone: the trusted uids pass, any other is a PeerError
// naming the socket, the uid and its user's name.
func TestCheckPeer(t *testing.T) {
	trusted := []int{1000, 0, 998}
	for _, uid := range trusted {
		if err := checkPeer("/run/a.sock", uid, trusted); err != nil {
			t.Errorf("uid %d: %v", uid, err)
		}
	}
	for _, uid := range []int{1, 65534, 4242424} {
		err := checkPeer("/run/a.sock", uid, trusted)
		var pe *PeerError
		if !errors.As(err, &pe) || !errors.Is(err, ErrUntrustedPeer) || pe.UID != uid {
			t.Fatalf("uid %d: %v", uid, err)
		}
		want := "refusing the agent socket /run/a.sock: " + peerHow + " uid " + strconv.Itoa(uid)
		if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
			want += " (" + u.Username + ")"
		}
		want += fmt.Sprintf(", not this user (uid %d), root or signagent; nothing was sent to it", os.Getuid())
		if err.Error() != want {
			t.Errorf("uid %d:\n got %s\nwant %s", uid, err, want)
		}
	}
}

// The trusted users: this one, root, and the service user where the
// system has it.
func TestTrustedUIDs(t *testing.T) {
	ids := trustedUIDs()
	if !slices.Contains(ids, os.Getuid()) || !slices.Contains(ids, os.Geteuid()) || !slices.Contains(ids, 0) {
		t.Fatalf("%v", ids)
	}
	if u, err := user.Lookup(ServiceUser); err == nil {
		if id, _ := strconv.Atoi(u.Uid); !slices.Contains(ids, id) {
			t.Fatalf("%v: not the service user's uid %d", ids, id)
		}
	}
	if slices.Contains(ids, 65534) && os.Getuid() != 65534 {
		t.Fatalf("%v: nobody is trusted", ids)
	}
}

// An agent socket served by this user's process is used (as the other
// tests do) and one served by another user's is refused after connecting
// and before anything is sent, on every call; making a listener of
// another user needs root.
func TestAnotherUsersAgentRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a listener as another user (uid 65534); the decision itself is TestCheckPeer's")
	}
	const nobody = 65534
	dir, err := os.MkdirTemp("", "peer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The test binary, where nobody may run it, in a directory nobody
	// may write its socket to.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "listener")
	src, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	os.Chown(dir, nobody, nobody)
	sock := filepath.Join(dir, "agent.sock")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), listenEnv+"="+sock, "GOCOVERDIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("the listener: %q %v", lines.Text(), lines.Err())
	}

	c, err := FromSocket(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	_, err = c.Ready(ctx)
	var pe *PeerError
	if !errors.As(err, &pe) || !errors.Is(err, ErrUntrustedPeer) || pe.UID != nobody {
		t.Fatalf("a socket of uid %d: %v", nobody, err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "refusing the agent socket "+sock+": ") || !strings.Contains(msg, "uid 65534") || strings.Contains(msg, "\n") {
		t.Fatalf("the message: %s", msg)
	}
	if u, err := user.LookupId("65534"); err == nil && !strings.Contains(msg, "uid 65534 ("+u.Username+")") {
		t.Fatalf("the message does not name user %s: %s", u.Username, msg)
	}
	t.Log(msg)
	// What the listener got from the first connection: nothing.
	if !lines.Scan() || lines.Text() != "received 0 bytes" {
		t.Fatalf("the listener: %q %v", lines.Text(), lines.Err())
	}
	// A call with a body is refused the same way, and nothing of it sent.
	if _, err := c.Call(ctx, "POST", "/Method", nil, "oidc profile=p", []byte(`{"secret":1}`), "application/json"); !errors.Is(err, ErrUntrustedPeer) {
		t.Fatalf("a proxied call: %v", err)
	}
	if !lines.Scan() || lines.Text() != "received 0 bytes" {
		t.Fatalf("the listener, for the proxied call: %q %v", lines.Text(), lines.Err())
	}
}
