package bench

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/safefile"
)

// Agent is an emulator in this process and `signagent serve` as a child on
// a temporary socket.
type Agent struct {
	Socket  string
	PID     int
	Startup time.Duration // from exec to the first ready answer
	cleanup []func()
}

// Stop ends the child (SIGTERM, then waits), closes the emulator and
// removes the temporary directory. It is safe to call twice.
func (a *Agent) Stop() {
	for i := len(a.cleanup) - 1; i >= 0; i-- {
		a.cleanup[i]()
	}
	a.cleanup = nil
}

// StartAgent starts the emulator, knowing cert and o.APIKey, and the agent,
// and waits until the agent is ready. The API key and the PIN reach the
// child through 0600 files named in its environment, never its argv.
func StartAgent(ctx context.Context, o *Options, cert *x509.Certificate) (*Agent, error) {
	a := &Agent{}
	if err := a.start(ctx, o, cert); err != nil {
		a.Stop()
		return nil, err
	}
	return a, nil
}

func (a *Agent) start(ctx context.Context, o *Options, cert *x509.Certificate) error {
	dir, err := os.MkdirTemp("", "signagent-bench")
	if err != nil {
		return err
	}
	a.cleanup = append(a.cleanup, func() { os.RemoveAll(dir) })
	emu, err := emulator.New(&emulator.Config{
		Partners: []emulator.Partner{{Name: "bench", APIKey: o.APIKey, Certificates: []string{string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))}}},
		Users:    []emulator.User{{ID: "bench", Phone: "9161234567", Linked: benchLinks()}},
	}, zerolog.Nop())
	if err == nil {
		err = emu.Start()
	}
	if err != nil {
		return err
	}
	a.cleanup = append(a.cleanup, func() { emu.Close(context.Background()) })
	keyFile := filepath.Join(dir, "api-key")
	if err := safefile.Write(keyFile, []byte(o.APIKey+"\n"), 0o600); err != nil {
		return err
	}
	a.Socket = filepath.Join(dir, "agent.sock")
	args := append([]string{"--log-level", "warn", "serve", "--listen", "unix:" + a.Socket, serveFlag(o.Executable, "--trusted-url"), emu.URL(),
		"--token-concurrency", strconv.Itoa(o.Workers), "--queue-size", strconv.Itoa(max(o.QueueSize, 1)),
		"--audit-log", filepath.Join(dir, "audit.log"), "--token-delay", o.TokenDelay.String()}, serveArgs(o.Executable, o.ServeArgs)...)
	cmd := exec.Command(o.Executable, args...)
	cmd.Env = append(childEnv(), "SIGNAGENT_API_KEY_FILE="+keyFile)
	if o.PINFile != "" {
		cmd.Env = append(cmd.Env, "SIGNAGENT_PIN_FILE="+o.PINFile)
	}
	// Should this process die without stopping it, the kernel ends the
	// child too: a benchmark leaves no agent behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	cmd.Stderr = o.Stderr
	startup, exited, err := startServe(ctx, cmd, a.Socket)
	if err != nil {
		return err
	}
	a.PID, a.Startup = cmd.Process.Pid, startup
	a.cleanup = append(a.cleanup, func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	})
	return nil
}

// startServe starts cmd, a `signagent serve` listening on the Unix socket
// sock, and waits until it is ready: it returns the time from exec to the
// first ready answer and a channel closed once cmd has been waited for
// (the caller stops it). One that exits first (a binary that is no agent,
// or one that refuses a flag) is said at once, not after waitReady's 15
// seconds, and is not left running on an error.
func startServe(ctx context.Context, cmd *exec.Cmd, sock string) (time.Duration, <-chan struct{}, error) {
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-wctx.Done():
		}
	}()
	a := &Agent{Socket: sock}
	if err := a.waitReady(wctx, t0); err != nil {
		select {
		case <-exited:
			err = fmt.Errorf("it exited before it was ready (%v)", cmd.ProcessState)
		default:
			cmd.Process.Signal(syscall.SIGTERM)
			<-exited
		}
		return 0, nil, err
	}
	return a.Startup, exited, nil
}

// childEnv is this process's environment without the settings the child
// gets from the benchmark itself.
func childEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "SIGNAGENT_API_KEY" || name == "SIGNAGENT_API_KEY_FILE" || name == "SIGNAGENT_CONFIG" ||
			name == "SIGNAGENT_LISTEN" || name == "LISTEN_FDS" || name == "LISTEN_PID"
	})
}

func (a *Agent) waitReady(ctx context.Context, t0 time.Time) error {
	client := agentclient.NewUnix(a.Socket)
	for {
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := client.Ready(rctx)
		cancel()
		if err == nil {
			a.Startup = time.Since(t0)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(t0) > 15*time.Second {
			return fmt.Errorf("the agent was not ready after 15s: %w", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// benchUsers is how many trusted-system users the bench's one service user
// is linked to: a cold session for the same text twice in one second would
// be a replay, so the cold row goes round them.
const benchUsers = 256

func benchLinks() []string {
	out := make([]string, benchUsers)
	for i := range out {
		out[i] = fmt.Sprintf("bench:bench-user-%d", i)
	}
	return out
}
