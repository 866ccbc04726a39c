// Package clitest holds what the signagent command's two test packages
// (cmd/signagent, the Go tests, and cmd/signagent/scripts, the testscript
// scripts) share: the binaries a test binary stands in for, and a
// settings directory of the run's own.
package clitest

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/cmd/internal/benchcmd"
	"github.com/signagent/signagent/cmd/internal/emulatorcmd"
	"github.com/signagent/signagent/cmd/signagent/internal/app"
)

// Commands are the programs a test binary runs as when testscript.Main
// starts it by their names: signagent itself, the emulator and the bench.
var Commands = map[string]func(){"signagent": app.Main, "signagent-emulator": emulatorcmd.Main, "signagent-bench": benchcmd.Main}

// Isolated runs the tests with a settings directory of their own, so that
// neither they nor the binaries they start with their environment read or
// write the settings file of the user running them (a test that runs
// `signagent config set` wrote to ~/.config/signagent before). The
// scripts set their own HOME.
type Isolated struct{ M *testing.M }

// Run runs the tests with XDG_CONFIG_HOME a directory of their own,
// removed after.
func (i Isolated) Run() int {
	dir, err := os.MkdirTemp("", "signagent-test-config")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755) // empty; an agent a test runs as nobody looks in it too
	os.Setenv("XDG_CONFIG_HOME", dir)
	// The commands the tests start are this test binary: built with the
	// race detector, each would sleep 1 s as it exits (GORACE's
	// atexit_sleep_ms), and the tests wait for hundreds of them. A race
	// still exits 66. scripts/test.sh sets the same.
	if _, set := os.LookupEnv("GORACE"); !set {
		os.Setenv("GORACE", "atexit_sleep_ms=50")
	}
	return i.M.Run()
}

// Poll calls cond until it holds or d has passed.
func Poll(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// Isolate gives the test an environment of its own for the commands it
// runs: the settings, state and runtime directories under t.TempDir(),
// and no running agent named.
func Isolate(t testing.TB) {
	t.Helper()
	for _, v := range []string{"XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"} {
		t.Setenv(v, t.TempDir())
	}
	t.Setenv(agentclient.SocketEnv, "")
}

// Run runs signagent in this process with args (the words after
// "signagent") and stdin, and returns its exit status and what it wrote.
// The families' own tests drive their commands with it, after Isolate.
func Run(t testing.TB, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errs bytes.Buffer
	code = app.Run(append([]string{"signagent"}, args...), strings.NewReader(stdin), &out, &errs)
	return code, out.String(), errs.String()
}
