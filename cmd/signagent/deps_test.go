package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShippedBinaryHoldsNoEmulator: the signagent that is shipped holds no
// package of the emulator, nor the benchmark that starts one in its
// process: they are signagent-emulator's and signagent-bench's. (`go
// version -m bin/signagent` lists modules, and the emulator is in this
// module: the packages are what the go command builds the binary from.)
func TestShippedBinaryHoldsNoEmulator(t *testing.T) {
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the binary's packages: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/signagent/signagent"
	pkgs := strings.Fields(string(out))
	var found bool
	for _, p := range pkgs {
		rel, ours := strings.CutPrefix(p, module+"/")
		found = found || p == module+"/cmd/signagent"
		if !ours {
			continue
		}
		for _, not := range []string{"emulator", "bench", "internal/emulatorcmd", "internal/benchcmd"} {
			if rel == not || strings.HasPrefix(rel, not+"/") {
				t.Errorf("signagent holds %s", p)
			}
		}
	}
	if !found || len(pkgs) < 20 {
		t.Fatalf("go list -deps named %d packages, not signagent's: %q", len(pkgs), out)
	}
}
