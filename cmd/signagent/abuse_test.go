package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
)

// tcpAgent starts serve on a Unix socket and a loopback port with a bearer
// token file of the test's.
func tcpAgent(t testing.TB) (*agentProc, string, string) {
	tk := procToken(t)
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	bearer := filepath.Join(dir, "bearer")
	os.WriteFile(bearer, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	a := startServe(t, signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+sock, "--listen", "tcp:127.0.0.1:0",
		"--bearer-token-file", bearer, "--audit-log", filepath.Join(dir, "audit.log")), sock)
	// Logged once every listener is open, with the port the kernel gave.
	return a, a.tcpAddr(t), dir
}

// rawHTTP sends one request line with method on a new TCP connection and
// returns the status line and whether the server closed the connection.
func rawHTTP(t testing.TB, addr, method string) (string, bool) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "%s /v1/signatures HTTP/1.1\r\nHost: agent\r\nContent-Length: 0\r\n\r\n", method)
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.Status, resp.Close
}

// TestInventedMethodsDoNotGrowMetrics: unauthenticated requests with
// invented methods are answered 401, close their connection, share one
// metrics label, and write only a rate-limited few log and audit lines.
func TestInventedMethodsDoNotGrowMetrics(t *testing.T) {
	t.Parallel()
	a, addr, dir := tcpAgent(t)
	a.do("GET", "/metrics", "") // the scrape's own series exist from now on
	_, before := a.do("GET", "/metrics", "")
	start := time.Now()
	for i := range 300 {
		status, closed := rawHTTP(t, addr, fmt.Sprintf("INVENTED%d", i))
		if !strings.HasPrefix(status, "401") || !closed {
			t.Fatalf("request %d: %s, connection closed %v", i, status, closed)
		}
	}
	_, after := a.do("GET", "/metrics", "")
	if strings.Contains(after, "INVENTED") {
		t.Fatal("an invented method became a metrics label")
	}
	if !strings.Contains(after, `signagent_requests_total{method="other",route="refused",status="401"} 300`) {
		t.Fatalf("refused requests not counted under one label:\n%s", grepLines(after, "signagent_requests_total"))
	}
	if len(after) > len(before)+2048 {
		t.Fatalf("/metrics grew from %d to %d bytes", len(before), len(after))
	}
	// The agent lets 10 refusals a second through to the log and the
	// audit (newSampler(10, time.Second)): at most that many for each
	// second the 300 took (under the race detector on a loaded machine
	// they took 8 s: 80 lines, over a fixed 50), and never all of them.
	allowed := min(10*(int(time.Since(start)/time.Second)+2), 299)
	audit, _ := os.ReadFile(filepath.Join(dir, "audit.log"))
	if n := strings.Count(string(audit), "unauthorized"); n > allowed {
		t.Fatalf("%d audit lines for 300 refused requests in %v: not rate-limited", n, time.Since(start).Round(time.Millisecond))
	}
	if n := strings.Count(a.stderr.String(), "caller refused"); n > allowed {
		t.Fatalf("%d log lines for 300 refused requests in %v: not rate-limited", n, time.Since(start).Round(time.Millisecond))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestIdleConnectionsAreBounded: 10,000 idle TCP connections cost the agent
// at most its TCP budget of descriptors, and a caller on the Unix socket is
// still served at once. The test closes its connections and stops itself.
func TestIdleConnectionsAreBounded(t *testing.T) {
	t.Parallel()
	a, addr, _ := tcpAgent(t)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for fails := 0; len(conns) < 10000 && fails < 50 && time.Now().Before(deadline); {
		c, err := net.DialTimeout("tcp", addr, 50*time.Millisecond)
		if err != nil {
			fails++ // the backlog is full: the kernel holds them, the agent is untouched
			continue
		}
		fails = 0
		conns = append(conns, c)
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", a.cmd.Process.Pid))
	t.Logf("%d idle connections opened; the agent holds %d descriptors", len(conns), len(fds))
	if len(conns) <= 128+64 {
		t.Fatalf("only %d idle connections were opened: too few to show a bound", len(conns))
	}
	if len(fds) > 128+64 {
		t.Fatalf("the agent holds %d descriptors with %d idle connections open", len(fds), len(conns))
	}
	start := time.Now()
	if code, body := a.sign(); code != 200 {
		t.Fatalf("a caller on the Unix socket: %d %s", code, body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("a caller on the Unix socket waited %v", d)
	}
}

// TestSocketTakeover: a second agent never removes a socket it did not
// make: a live one, and a dead one of another user.
func TestSocketTakeover(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	first := startServe(t, signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull), sock)
	code, stderr, _ := runBinary(t, signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull))
	if code == 0 || !strings.Contains(stderr, "another agent is already serving") {
		t.Fatalf("second agent on a live socket: exit %d: %s", code, stderr)
	}
	if c, body := first.sign(); c != 200 {
		t.Fatalf("the first agent lost its socket: %d %s", c, body)
	}

	if os.Getuid() != 0 {
		return // a socket of another user needs root to make
	}
	dead := filepath.Join(dir, "dead.sock")
	l, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	os.Lchown(dead, 65534, 65534)
	code, stderr, _ = runBinary(t, signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+dead, "--audit-log", os.DevNull))
	if code == 0 || !strings.Contains(stderr, "dead socket of another user") {
		t.Fatalf("a dead socket of another user: exit %d: %s", code, stderr)
	}
	if _, err := os.Lstat(dead); err != nil {
		t.Fatalf("the other user's socket was removed: %v", err)
	}
}

// TestWorldReadableSecrets: a bearer token file or TLS key that every user
// may read is refused at start.
func TestWorldReadableSecrets(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	dir := shortDir(t)
	bearer := filepath.Join(dir, "bearer")
	os.WriteFile(bearer, []byte("0123456789abcdef0123456789abcdef\n"), 0o644)
	os.Chmod(bearer, 0o644)
	code, stderr, _ := runBinary(t, signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+filepath.Join(dir, "a.sock"),
		"--listen", "tcp:127.0.0.1:0", "--bearer-token-file", bearer))
	if code != cmdutil.ExitBadInput || !strings.Contains(stderr, "has mode 0644") {
		t.Fatalf("world-readable bearer file: exit %d: %s", code, stderr)
	}
}

// TestSignOutputs: --out at a FIFO, a symlink and a character device made
// by the test, and /dev/stdout; a bad --out is refused before the token is
// used and leaves no --text-out behind.
func TestSignOutputs(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	dir := t.TempDir()
	env := serveEnv(tk)
	sign := func(args ...string) (int, string, string) {
		cmd := signagent(t, env, append([]string{"trusted", "sign", "--phone", "9161234567", "--format", "base64"}, args...)...)
		var stdout strings.Builder
		cmd.Stdout = &stdout
		code, stderr, _ := runBinary(t, cmd)
		return code, stdout.String(), stderr
	}

	t.Run("/dev/stdout", func(t *testing.T) {
		code, stdout, stderr := sign("--out", "/dev/stdout")
		if code != 0 || !strings.HasPrefix(stdout, "MII") {
			t.Fatalf("exit %d, stdout %q: %s", code, stdout, stderr)
		}
		if st, err := os.Lstat("/dev/stdout"); err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("/dev/stdout is no longer the symlink it was: %v %v", st, err)
		}
	})
	t.Run("a FIFO", func(t *testing.T) {
		fifo := filepath.Join(dir, "fifo")
		syscall.Mkfifo(fifo, 0o600)
		got := make(chan string)
		go func() { b, _ := os.ReadFile(fifo); got <- string(b) }()
		time.Sleep(50 * time.Millisecond)
		if code, _, stderr := sign("--out", fifo); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if s := <-got; !strings.HasPrefix(s, "MII") {
			t.Fatalf("the FIFO's reader got %q", s)
		}
		if st, _ := os.Lstat(fifo); st.Mode()&os.ModeNamedPipe == 0 {
			t.Fatal("the FIFO was replaced")
		}
	})
	t.Run("a symlink to a file", func(t *testing.T) {
		target := filepath.Join(dir, "target")
		os.WriteFile(target, nil, 0o600)
		link := filepath.Join(dir, "link")
		os.Symlink(target, link)
		if code, _, stderr := sign("--out", link); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if b, _ := os.ReadFile(target); !strings.HasPrefix(string(b), "MII") {
			t.Fatalf("the target holds %q", b)
		}
		if st, _ := os.Lstat(link); st.Mode()&os.ModeSymlink == 0 {
			t.Fatal("the symlink was replaced")
		}
	})
	t.Run("a character device", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("making a device node needs root; CI runs as root")
		}
		dev := filepath.Join(dir, "null")
		if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := sign("--out", dev); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if st, _ := os.Lstat(dev); st.Mode()&os.ModeCharDevice == 0 {
			t.Fatal("the device node was replaced by a file")
		}
	})
	t.Run("a bad --out leaves no --text-out", func(t *testing.T) {
		textOut := filepath.Join(dir, "text")
		code, _, stderr := sign("--text-out", textOut, "--out", dir)
		if code != cmdutil.ExitBadInput || !strings.Contains(stderr, "is a directory") {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if _, err := os.Stat(textOut); err == nil {
			t.Fatal("--text-out was written though --out was refused")
		}
	})
}

// TestSIGHUPUnderLoad: SIGHUP every 30ms while four callers sign: every
// answer is 200 (a reload that changes nothing changes nothing), and the
// audit log, moved away as logrotate does, is reopened.
func TestSIGHUPUnderLoad(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	auditLog := filepath.Join(dir, "audit.log")
	a := startServe(t, signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+sock, "--audit-log", auditLog), sock)
	stop := make(chan struct{})
	wait := load(a, 4, stop)
	for range 100 {
		a.cmd.Process.Signal(syscall.SIGHUP)
		time.Sleep(30 * time.Millisecond)
	}
	close(stop)
	allOK(t, a, "100 SIGHUPs", wait())
	os.Rename(auditLog, auditLog+".1")
	a.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 5*time.Second, "a new audit log after SIGHUP", func() bool {
		a.sign()
		b, err := os.ReadFile(auditLog)
		return err == nil && strings.Contains(string(b), `"operation":"sign"`)
	})
}

// TestAuditLogChecks: an audit log that is a symlink, or that every user
// may read, is refused at start.
func TestAuditLogChecks(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	dir := shortDir(t)
	target := filepath.Join(dir, "real.log")
	os.WriteFile(target, nil, 0o600)
	link := filepath.Join(dir, "link.log")
	os.Symlink(target, link)
	open := filepath.Join(dir, "open.log")
	os.WriteFile(open, nil, 0o644)
	os.Chmod(open, 0o644)
	for file, want := range map[string]string{link: "is a symlink", open: "has mode 0644"} {
		code, stderr, _ := runBinary(t, signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+filepath.Join(dir, "a.sock"), "--audit-log", file))
		if code != cmdutil.ExitBadInput || !strings.Contains(stderr, want) {
			t.Fatalf("--audit-log %s: exit %d: %s", file, code, stderr)
		}
	}
}

// TestReloadSwapsKeysUnderLoad: each SIGHUP switches the key (rsa, ec, ...)
// while four callers sign: the new key is opened first and the old one
// closed once its signatures are done, so every answer is 200.
func TestReloadSwapsKeysUnderLoad(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	conf := filepath.Join(dir, "agent.yaml")
	var env []string
	for _, kv := range serveEnv(tk) {
		if !strings.HasPrefix(kv, "SIGNAGENT_KEY_LABEL=") {
			env = append(env, kv)
		}
	}
	os.WriteFile(conf, []byte("key-label: rsa\n"), 0o600)
	a := startServe(t, signagent(t, env, "serve", "--config", conf, "--listen", "unix:"+sock, "--audit-log", os.DevNull), sock)
	stop := make(chan struct{})
	wait := load(a, 4, stop)
	for i := range 20 {
		os.WriteFile(conf, []byte("key-label: "+[]string{"ec", "rsa"}[i%2]+"\n"), 0o600)
		a.cmd.Process.Signal(syscall.SIGHUP)
		time.Sleep(60 * time.Millisecond)
	}
	close(stop)
	allOK(t, a, "20 key swaps", wait())
}

// allOK requires that every answer counted during what was 200.
func allOK(t *testing.T, a *agentProc, what string, counts map[int]int) {
	t.Helper()
	t.Logf("answers during %s: %v", what, counts)
	if len(counts) != 1 || counts[200] == 0 {
		t.Fatalf("answers other than 200 during %s: %v\n%s", what, counts, a.stderr.String())
	}
}
