package secret

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// AllowCoreDumpsEnv, set to a true value (1, true), leaves the process as
// it was started: dumpable, with the core size limit it inherited. For
// debugging signagent itself: a core file of a process that held a PIN or
// a client secret holds them too.
const AllowCoreDumpsEnv = "SIGNAGENT_ALLOW_CORE_DUMPS"

// KeepFromOtherProcesses closes this process to other processes of the
// same user, as ssh-agent and gpg-agent do, before it reads any secret:
// PR_SET_DUMPABLE 0 (no core file; /proc/PID/environ, mem and maps and
// ptrace open only to root) and a core size limit of 0 (soft and hard,
// which the processes it starts inherit). Unless $SIGNAGENT_ALLOW_CORE_DUMPS
// is true: then it does nothing and says so (done false). The secrets in
// its environment are kept from the processes it starts by ChildEnv.
func KeepFromOtherProcesses() (done bool, err error) {
	if allow, _ := strconv.ParseBool(os.Getenv(AllowCoreDumpsEnv)); allow {
		return false, nil
	}
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return false, fmt.Errorf("could not set the core size limit to 0: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return false, fmt.Errorf("could not make the process non-dumpable (prctl PR_SET_DUMPABLE): %w", err)
	}
	return true, nil
}
