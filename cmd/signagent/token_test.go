package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
)

// signagent returns a command that runs this test binary as the signagent
// binary (testscript.Main dispatches on argv[0]): the real main, with real
// signals and exit statuses.
func signagent(t testing.TB, env []string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: exe, Args: append([]string{"signagent"}, args...)}
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// runBinary runs the command and returns its exit status, stderr and how
// long it took.
func runBinary(t testing.TB, cmd *exec.Cmd) (int, string, time.Duration) {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String(), took
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String(), took
	}
	t.Fatal(err)
	return 0, "", 0
}

// oneLine checks that stderr is one line "signagent: ..." holding want,
// with no Go stack dump.
func oneLine(t testing.TB, stderr, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "signagent: ") || !strings.Contains(last, want) || strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "SIGSEGV:") {
		t.Fatalf("stderr %q should end in one line naming %q, with no stack dump", stderr, want)
	}
}

func TestHungTokenBoundsTheCLI(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	shim := pkcs11test.Shim(t)
	hang := filepath.Join(t.TempDir(), "hang")
	os.WriteFile(hang, nil, 0o600)
	cmd := signagent(t, append(tk.Env(), "SHIM_REAL_MODULE="+tk.Module, "SHIM_HANG_FILE="+hang, "SIGNAGENT_API_KEY="+testAPIKey),
		"trusted", "sign", "--module", shim, "--token-label", tk.Label, "--key-label", "rsa", "--pin-file", tk.PINFile,
		"--phone", "9161234567", "--token-timeout", "2s")
	code, stderr, took := runBinary(t, cmd)
	// The bound leaves room for starting a race-built binary and opening
	// the token on a loaded machine; without the timeout the call hangs.
	if code != cmdutil.ExitFailure || took > 8*time.Second {
		t.Fatalf("exit %d after %v (want 1 within the 2s timeout plus the start): %s", code, took, stderr)
	}
	oneLine(t, stderr, "did not answer in time")
	t.Logf("a hung C_Sign with --token-timeout 2s: exit after %v", took)
}

func TestBrokenModules(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	shim := pkcs11test.Shim(t)
	libm, _ := filepath.Glob("/usr/lib/*/libm.so.6")
	if len(libm) == 0 {
		libm, _ = filepath.Glob("/lib/*/libm.so.6")
	}
	if len(libm) == 0 {
		t.Fatal("no libm.so.6 to use as a library that is not a PKCS#11 module")
	}
	for _, tc := range []struct {
		name, module string
		env          []string
		want         string
	}{
		{"crashes in C_Initialize", shim, []string{"SHIM_CRASH_INIT=1"}, "crashed while being loaded and initialized (segmentation fault)"},
		{"a library, not PKCS#11", libm[0], nil, "could not be loaded as a shared library with C_GetFunctionList"},
	} {
		for _, args := range [][]string{
			{"trusted", "sign", "--phone", "9161234567"},
			{"token", "list"},
		} {
			t.Run(tc.name+"/"+args[0], func(t *testing.T) {
				env := append([]string{"SHIM_REAL_MODULE=" + tk.Module, "SIGNAGENT_API_KEY=" + testAPIKey}, tc.env...)
				env = append(env, "SIGNAGENT_PIN_FILE="+tk.PINFile)
				cmd := signagent(t, env, append(args, "--module", tc.module)...)
				code, stderr, _ := runBinary(t, cmd)
				if code != cmdutil.ExitFailure {
					t.Fatalf("exit %d, want 1: %s", code, stderr)
				}
				oneLine(t, stderr, tc.want)
			})
		}
	}
}

// TestPINInputs: every bad PIN source is one clear line and exit 2, before
// the token sees anything; the precedence is flag, environment, prompt.
func TestPINInputs(t *testing.T) {
	tk := pkcs11test.New(t)
	dir := t.TempDir()
	asDir := filepath.Join(dir, "pin-dir")
	os.Mkdir(asDir, 0o700)
	fifo := filepath.Join(dir, "pin-fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "pin-zero")
	os.Symlink("/dev/zero", zero)
	huge := filepath.Join(dir, "pin-huge")
	os.WriteFile(huge, bytes.Repeat([]byte("1"), 10<<20), 0o600)
	nul := filepath.Join(dir, "pin-nul")
	os.WriteFile(nul, []byte("1234\x0056\n"), 0o600)
	wrong := filepath.Join(dir, "pin-wrong")
	os.WriteFile(wrong, []byte("999999\n"), 0o600)
	base := []string{"signagent", "trusted", "sign", "--module", tk.Module, "--token-label", tk.Label, "--key-label", "rsa", "--phone", "9161234567"}
	for _, tc := range []struct {
		name string
		file string
		want string
	}{
		{"a directory", asDir, "is a directory, not a regular file"},
		{"a FIFO", fifo, "is a FIFO, not a regular file"},
		{"a symlink to /dev/zero", zero, "is a character device, not a regular file"},
		{"10 MB", huge, "more than the 512 it may"},
		{"a NUL byte", nul, "holds a control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SIGNAGENT_API_KEY", testAPIKey)
			var stdout, stderr bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- run(append(base, "--pin-file", tc.file), strings.NewReader(""), &stdout, &stderr) }()
			select {
			case code := <-done:
				if code != cmdutil.ExitBadInput {
					t.Fatalf("exit %d, want 2: %s", code, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("hung reading the PIN file")
			}
			oneLine(t, stderr.String(), tc.want)
		})
	}
	t.Run("--certificate-file and --chain at /dev/zero", func(t *testing.T) {
		t.Setenv("SIGNAGENT_API_KEY", testAPIKey)
		for _, flag := range []string{"--certificate-file", "--chain"} {
			var stdout, stderr bytes.Buffer
			code := run(append(base, "--pin-file", tk.PINFile, flag, "/dev/zero"), strings.NewReader(""), &stdout, &stderr)
			if code != cmdutil.ExitBadInput {
				t.Fatalf("%s /dev/zero: exit %d: %s", flag, code, stderr.String())
			}
			oneLine(t, stderr.String(), "is a character device, not a regular file")
		}
	})
	t.Run("a flag beats the environment", func(t *testing.T) {
		t.Setenv("SIGNAGENT_API_KEY", testAPIKey)
		t.Setenv("SIGNAGENT_PIN", "999999") // stale: would cost a try if it won
		var stdout, stderr bytes.Buffer
		if code := run(append(base, "--pin-file", tk.PINFile, "--format", "base64"), strings.NewReader(""), &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	})
	t.Run("the error names the PIN's source", func(t *testing.T) {
		t.Setenv("SIGNAGENT_API_KEY", testAPIKey)
		var stdout, stderr bytes.Buffer
		if code := run(append(base, "--pin-file", wrong), strings.NewReader(""), &stdout, &stderr); code != cmdutil.ExitFailure {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		oneLine(t, stderr.String(), "check the PIN from the file "+wrong+" (--pin-file)")
		t.Setenv("SIGNAGENT_PIN", "999999")
		stderr.Reset()
		run(base, strings.NewReader(""), &stdout, &stderr)
		// The same PIN from another source is not sent again either.
		oneLine(t, stderr.String(), "the PIN from $SIGNAGENT_PIN was refused before, so it is not tried again")
		if strings.Contains(stderr.String(), "999999") {
			t.Fatal("the PIN is in the error")
		}
	})
}

// agentProc is a `signagent serve` process on a Unix socket.
type agentProc struct {
	cmd    *exec.Cmd
	sock   string
	stderr *pkcs11test.LogBuffer
	done   chan struct{}
	client *http.Client
}

// servingTCP is the address serve bound for `--listen tcp:127.0.0.1:0`,
// read from its "agent serving" line (logged at info, the default): a port
// the kernel gave it, never one the test guessed free and another process
// could take first.
var servingTCP = regexp.MustCompile(`agent serving listen=.*"tcp:(127\.0\.0\.1:[1-9][0-9]*)"`)

// tcpAddr waits for serve's "agent serving" line and returns its TCP
// address.
func (a *agentProc) tcpAddr(t testing.TB) string {
	t.Helper()
	var addr string
	if !clitest.Poll(30*time.Second, func() bool {
		if m := servingTCP.FindStringSubmatch(a.stderr.String()); m != nil {
			addr = m[1]
			return true
		}
		return false
	}) {
		t.Fatalf("serve logged no TCP address it serves on:\n%s", a.stderr.String())
	}
	return addr
}

// startServe starts serve with args on a socket in dir and waits until it
// listens.
func startServe(t testing.TB, cmd *exec.Cmd, sock string) *agentProc {
	t.Helper()
	a := &agentProc{cmd: cmd, sock: sock, stderr: &pkcs11test.LogBuffer{}, done: make(chan struct{})}
	cmd.Stderr = a.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-a.done
	})
	a.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, err := os.Stat(sock); err == nil && st.Mode()&os.ModeSocket != 0 {
			return a
		}
		select {
		case <-a.done:
			t.Fatalf("serve exited: %s", a.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not listen: %s", a.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *agentProc) do(method, path, body string) (int, string) {
	return a.doWith(method, path, body, nil)
}

// doWith is do with request headers.
func (a *agentProc) doWith(method, path, body string, header map[string]string) (int, string) {
	req, _ := http.NewRequest(method, "http://agent"+path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (a *agentProc) sign() (int, string) {
	return a.do("POST", "/v1/signatures", `{"phone":"9161234567"}`)
}

// waitFor polls cond every 20ms for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s did not happen within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// serveEnv is the environment of an agent on tk.
func serveEnv(tk *pkcs11test.Token) []string {
	return append(tk.Env(), "SIGNAGENT_API_KEY="+testAPIKey, "SIGNAGENT_PIN_FILE="+tk.PINFile, "SIGNAGENT_TOKEN_LABEL="+tk.Label,
		"SIGNAGENT_KEY_LABEL=rsa", "SIGNAGENT_PKCS11_MODULE="+tk.Module)
}

// load sends signatures from n callers until stop is closed, counting the
// answers by status.
func load(a *agentProc, n int, stop chan struct{}) (wait func() map[int]int) {
	var mu sync.Mutex
	counts := map[int]int{}
	var errs []string
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, msg := a.sign()
				mu.Lock()
				if code == 0 && len(errs) < 3 {
					errs = append(errs, msg)
				}
				counts[code]++
				mu.Unlock()
				if code != 200 {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	return func() map[int]int {
		wg.Wait()
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, "load: no answer:", e)
		}
		return counts
	}
}

// TestServeRecoversALostToken runs the real binary on the real SoftHSM token
// under load, takes the token away (its directory moved aside) and puts it
// back: no answer is a 500, /readyz and the metric say not ready while it is
// out, and signatures succeed again without a restart.
func TestServeRecoversALostToken(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	sock := filepath.Join(shortDir(t), "a.sock")
	a := startServe(t, signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull), sock)
	if code, body := a.sign(); code != 200 {
		t.Fatalf("before: %d %s", code, body)
	}
	stop := make(chan struct{})
	wait := load(a, 4, stop)
	time.Sleep(200 * time.Millisecond)
	tk.Remove(t)
	waitFor(t, 5*time.Second, "/readyz to say not ready", func() bool {
		code, body := a.do("GET", "/readyz", "")
		return code == 503 && strings.Contains(body, "no longer on token")
	})
	if _, body := a.do("GET", "/metrics", ""); !strings.Contains(body, "\nsignagent_token_ready 0\n") {
		t.Fatal("signagent_token_ready is not 0 while the token is out")
	}
	code, body := a.sign()
	if code != 503 || !strings.Contains(body, `"token_not_ready"`) {
		t.Fatalf("while out: %d %s", code, body)
	}
	time.Sleep(500 * time.Millisecond)
	tk.Insert(t)
	took := waitFor(t, 10*time.Second, "a signature after the token came back", func() bool { c, _ := a.sign(); return c == 200 })
	close(stop)
	counts := wait()
	t.Logf("first 200 %v after the token came back; answers under load: %v", took, counts)
	for status, n := range counts {
		if status != 200 && status != 503 {
			t.Fatalf("%d answers with status %d (%v): %s", n, status, counts, a.stderr.String())
		}
	}
}

// TestServeRecoversAnUnreadableToken: the token directory made unreadable
// (chmod 000) and readable again. Root reads anything, so as root the
// agent runs as nobody.
func TestServeRecoversAnUnreadableToken(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	cmd := signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull)
	if os.Getuid() == 0 {
		asNobody(t, cmd, tk.Dir, dir)
	}
	a := startServe(t, cmd, sock)
	if code, body := a.sign(); code != 200 {
		t.Fatalf("before: %d %s %s", code, body, a.stderr.String())
	}
	tokens := filepath.Join(tk.Dir, "tokens")
	os.Chmod(tokens, 0)
	waitFor(t, 5*time.Second, "/readyz to say not ready", func() bool { c, _ := a.do("GET", "/readyz", ""); return c == 503 })
	if code, body := a.sign(); code != 503 {
		t.Fatalf("while unreadable: %d %s", code, body)
	}
	os.Chmod(tokens, 0o700)
	took := waitFor(t, 10*time.Second, "a signature after the token is readable again", func() bool { c, _ := a.sign(); return c == 200 })
	t.Logf("first 200 %v after the token became readable", took)
}

// asNobody makes cmd run as the user nobody, with dirs (and what is in
// them) its own and their parents passable, and the binary where nobody
// may run it.
func asNobody(t *testing.T, cmd *exec.Cmd, dirs ...string) {
	t.Helper()
	const nobody = 65534
	for _, d := range dirs {
		filepath.Walk(d, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, nobody, nobody) })
		for p := filepath.Dir(d); p != "/" && p != "."; p = filepath.Dir(p) {
			if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o001 == 0 {
				os.Chmod(p, st.Mode().Perm()|0o011)
				t.Cleanup(func() { os.Chmod(p, st.Mode().Perm()) })
			}
		}
	}
	bin := filepath.Join(shortDir(t), "signagent")
	src, err := os.ReadFile(cmd.Path)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bin, src, 0o755)
	os.Chmod(filepath.Dir(bin), 0o755)
	cmd.Path = bin
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Env = append(cmd.Env, "HOME="+dirs[0], "GOCOVERDIR=")
}

// TestServeHungToken: C_Sign stops returning (the test module). The caller
// is answered at the token deadline, /readyz says the token does not
// answer, and SIGTERM ends the agent within its grace plus a second.
func TestServeHungToken(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	shim := pkcs11test.Shim(t)
	dir := shortDir(t)
	hang := filepath.Join(dir, "hang")
	sock := filepath.Join(dir, "a.sock")
	env := append(serveEnv(tk), "SHIM_REAL_MODULE="+tk.Module, "SHIM_HANG_FILE="+hang, "SIGNAGENT_PKCS11_MODULE="+shim)
	a := startServe(t, signagent(t, env, "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull,
		"--token-timeout", "2s", "--shutdown-grace", "1s"), sock)
	if code, body := a.sign(); code != 200 {
		t.Fatalf("before: %d %s: %s", code, body, a.stderr.String())
	}
	os.WriteFile(hang, nil, 0o600)
	start := time.Now()
	code, body := a.sign()
	if took := time.Since(start); code != 503 || took > 6*time.Second {
		t.Fatalf("a hung signature: %d after %v: %s", code, took, body)
	}
	code, body = a.do("GET", "/readyz", "")
	if code != 503 || !strings.Contains(body, "did not answer in time") {
		t.Fatalf("readyz with a hung token: %d %s", code, body)
	}
	var inflight atomic.Int32
	go func() { inflight.Add(1); a.sign() }()
	time.Sleep(100 * time.Millisecond)
	start = time.Now()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("serve still running 10s after SIGTERM with a hung token: %s", a.stderr.String())
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("serve took %v to exit (grace 1s)", took)
	}
	t.Logf("exit %v after SIGTERM with a C_Sign stuck (grace 1s)", time.Since(start))
}

// TestTwoAgentsOnOneToken: two agents, each its own process, share one
// token and both sign.
func TestTwoAgentsOnOneToken(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	dir := shortDir(t)
	var agents []*agentProc
	for i := range 2 {
		sock := filepath.Join(dir, fmt.Sprintf("a%d.sock", i))
		agents = append(agents, startServe(t, signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull), sock))
	}
	for range 5 {
		for i, a := range agents {
			if code, body := a.sign(); code != 200 {
				t.Fatalf("agent %d: %d %s", i, code, body)
			}
		}
	}
}

// shortDir is a temporary directory with a short path (a socket path has
// room for about 100 bytes).
func shortDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "sa")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestPINPad: with no PIN given and a reader that has a keypad
// (CKF_PROTECTED_AUTHENTICATION_PATH), the command asks for nothing,
// says to type the PIN on the reader, and logs in without a PIN; a PIN
// that is given is used as ever. SoftHSM has no reader: the shim module
// plays one (SHIM_PINPAD_FILE holds what is "typed" on it).
func TestPINPad(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	shim := pkcs11test.Shim(t)
	pad := filepath.Join(t.TempDir(), "keypad")
	pin, _ := os.ReadFile(tk.PINFile)
	os.WriteFile(pad, pin, 0o600)
	env := append(tk.Env(), "SHIM_REAL_MODULE="+tk.Module, "SHIM_PINPAD_FILE="+pad, "SIGNAGENT_API_KEY="+testAPIKey)
	args := []string{"trusted", "sign", "--module", shim, "--token-label", tk.Label, "--key-label", "rsa", "--phone", "9161234567", "--format", "base64"}
	code, stderr, _ := runBinary(t, signagent(t, env, args...))
	if code != 0 || !strings.Contains(stderr, "enter the PIN on the reader's keypad") || strings.Contains(stderr, "PIN for token") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(pad + ".log"); strings.Count(string(b), "login on the keypad") != 1 {
		t.Fatalf("keypad logins: %q", b)
	}
	// A PIN given is sent as it is, the keypad not used.
	code, stderr, _ = runBinary(t, signagent(t, env, append(args, "--pin-file", tk.PINFile)...))
	if code != 0 || strings.Contains(stderr, "keypad") {
		t.Fatalf("with --pin-file: exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(pad + ".log"); strings.Count(string(b), "login on the keypad") != 1 {
		t.Fatalf("keypad used although a PIN was given: %q", b)
	}
	// Nobody types on the keypad: one line, the keypad named.
	os.Remove(pad)
	code, stderr, _ = runBinary(t, signagent(t, env, args...))
	if code == 0 {
		t.Fatalf("no keypad input: exit 0: %s", stderr)
	}
	oneLine(t, stderr, "on the reader's keypad")
}

// procToken is a SoftHSM token for the processes a parallel test starts
// (they find it by tk.Env or serveEnv; the test's environment is left
// alone).
func procToken(t testing.TB) *pkcs11test.Token {
	return pkcs11test.NewWith(t, pkcs11test.Options{ForProcesses: true})
}
