package secret

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKeepFromOtherProcesses runs KeepFromOtherProcesses in a child (this
// test binary again: the call cannot be undone in the process that makes
// it) and reads what it did there with prctl(PR_GET_DUMPABLE) and
// getrlimit, with and without $SIGNAGENT_ALLOW_CORE_DUMPS.
func TestKeepFromOtherProcesses(t *testing.T) {
	if os.Getenv("SECRET_TEST_KEEP") != "" {
		done, err := KeepFromOtherProcesses()
		dumpable, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
		var lim unix.Rlimit
		unix.Getrlimit(unix.RLIMIT_CORE, &lim)
		limits, _ := os.ReadFile("/proc/self/limits")
		core := ""
		for line := range strings.SplitSeq(string(limits), "\n") {
			if strings.HasPrefix(line, "Max core file size") {
				core = strings.Join(strings.Fields(line)[4:6], " ")
			}
		}
		fmt.Printf("%s %v dumpable=%d rlimit=%d/%d limits=%s\n", map[bool]string{true: "done", false: "left"}[done], err, dumpable, lim.Cur, lim.Max, core)
		os.Exit(0)
	}
	for _, tc := range []struct {
		allow, want string
	}{
		{"", "done <nil> dumpable=0 rlimit=0/0 limits=0 0"},
		{"0", "done <nil> dumpable=0 rlimit=0/0 limits=0 0"},
		{"1", "left <nil> dumpable=1"},
		{"true", "left <nil> dumpable=1"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKeepFromOtherProcesses$")
		cmd.Env = append(os.Environ(), "SECRET_TEST_KEEP=1", AllowCoreDumpsEnv+"="+tc.allow)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s=%q: %v", AllowCoreDumpsEnv, tc.allow, err)
		}
		if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s=%q: %q, want %q", AllowCoreDumpsEnv, tc.allow, got, tc.want)
		}
	}
}
