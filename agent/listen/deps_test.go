package listen

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoCgo: the listeners link no package of this module that uses cgo
// (pkcs11 above all): a TLS key's file mode is checked by safefile, and
// the agent's listeners build wherever Go alone builds.
func TestNoCgo(t *testing.T) {
	t.Parallel()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the package's imports: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{.ImportPath}} {{len .CgoFiles}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/signagent/signagent/"
	var ours int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, cgo, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(pkg, module) {
			continue
		}
		ours++
		if cgo != "0" || strings.HasPrefix(pkg, module+"pkcs11") {
			t.Errorf("agent/listen links %s (%s cgo files)", pkg, cgo)
		}
	}
	if ours < 2 {
		t.Fatalf("go list -deps named %d packages of this module, not agent/listen's: %q", ours, out)
	}
}
