package bench

// The processes bench proxy starts and measures: the agents under test,
// the helpers (the business API, the Go floor) and their CPU time.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/signagent/signagent/oidc"
)

// proxySetup is what every agent bench proxy starts shares: the run's
// directory (with the bearer and client-secret files), the business
// API's URL and the profile's access token.
type proxySetup struct {
	dir, upURL, token string
	stderr            io.Writer
}

// proxyAgent is one `signagent serve` bench proxy measures.
type proxyAgent struct {
	addr   string // loopback TCP host:port, with the bearer
	sock   string // its Unix socket
	cmd    *exec.Cmd
	exited <-chan struct{} // closed when cmd has been waited for
}

// start starts exe as `signagent serve` with the settings every agent of
// the run gets, in a directory of its own under s.dir named name: one
// OpenID Connect profile "bench" whose access token lives a day, a record
// written into its own token store; over a Unix socket and loopback TCP
// with the bearer; and waits until it is ready. The caller stops it.
func (s proxySetup) start(ctx context.Context, name, exe string) (*proxyAgent, error) {
	dir := filepath.Join(s.dir, name)
	state := filepath.Join(dir, "state")
	rec := &oidc.Record{Profile: "bench", AuthURL: "http://127.0.0.1:9", ClientID: "bench", AccessToken: s.token, TokenType: "Bearer",
		Expiry: time.Now().Add(24 * time.Hour), Scopes: []string{"openid", "Service.PublicAPI.Staging"}, Subject: "bench",
		SignedInAt: time.Now()}
	if err := (oidc.Files{Dir: state}).Save(rec); err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	a := &proxyAgent{addr: addr, sock: filepath.Join(dir, "a.sock")}
	a.cmd = exec.CommandContext(ctx, exe, "--log-level", "error", "serve", "--listen", "unix:"+a.sock, "--listen", "tcp:"+addr,
		"--bearer-token-file", filepath.Join(s.dir, "bearer"), "--audit-log", filepath.Join(dir, "audit.log"), serveFlag(exe, "--business-url"), s.upURL,
		serveFlag(exe, "--oidc-url"), "http://127.0.0.1:9", "--client-id", "bench", "--client-secret-file", filepath.Join(s.dir, "client-secret"),
		"--token-store", state, "--config", os.DevNull)
	a.cmd.Env = cleanEnv()
	a.cmd.Stderr = s.stderr
	_, exited, err := startServe(ctx, a.cmd, a.sock)
	if err != nil {
		return nil, err
	}
	a.exited = exited
	return a, nil
}

// stop ends the agent (SIGTERM) and waits for it.
func (a *proxyAgent) stop() {
	a.cmd.Process.Signal(syscall.SIGTERM)
	<-a.exited
}

// startHelper starts `signagent-bench NAME ARGS... --listen ADDR` (the
// business API or the Go floor) on a free loopback address, with
// cleanEnv, and waits until it listens.
func startHelper(ctx context.Context, o ProxyOptions, what, name string, args ...string) (string, *exec.Cmd, error) {
	addr, err := freePort()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, o.Helper, append(append([]string{name}, args...), "--listen", addr)...)
	cmd.Env = cleanEnv()
	cmd.Stderr = o.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("could not start the benchmark's %s: %w", what, err)
	}
	if err := waitListening(ctx, addr); err != nil {
		stopHelper(cmd)
		return "", nil, fmt.Errorf("the benchmark's %s: %w", what, err)
	}
	return addr, cmd, nil
}

// cleanEnv is the environment without SIGNAGENT_ and LISTEN_ variables:
// the processes bench proxy starts take their settings from their flags.
func cleanEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SIGNAGENT_") || strings.HasPrefix(kv, "LISTEN_") })
}

// stopHelper ends a process startHelper started and waits for it.
func stopHelper(cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// processCPU is the user and system time of process pid and of its
// children (nginx's workers), from /proc; zero when it cannot be read.
func processCPU(pid int) time.Duration {
	ticks := func(stat string) (ppid, t int64) {
		i := strings.LastIndexByte(stat, ')')
		if i < 0 {
			return 0, 0
		}
		f := strings.Fields(stat[i+1:])
		if len(f) < 13 {
			return 0, 0
		}
		ppid, _ = strconv.ParseInt(f[1], 10, 64)
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		return ppid, u + s
	}
	var total int64
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		_, total = ticks(string(b))
	}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		if ppid, t := ticks(string(b)); ppid == int64(pid) {
			total += t
		}
	}
	return time.Duration(total) * cpuTick
}

// cpuTick is what /proc counts process time in (USER_HZ is 100 on Linux).
const cpuTick = 10 * time.Millisecond
