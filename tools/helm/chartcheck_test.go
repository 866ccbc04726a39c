package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestChartCheck: scripts/chart-check.sh, which scripts/release.sh runs
// before helm package, passes the chart with its examples, and fails a
// copy of it whose example has a typo under agent.settings, or leaves a
// required value out, or is not YAML: exit 1 and one line naming the file.
func TestChartCheck(t *testing.T) {
	out, err := exec.Command("go", "tool", "-n", "helm").Output()
	if err != nil {
		t.Fatalf("go tool -n helm: %v", err)
	}
	helm := strings.TrimSpace(string(out))
	script, err := filepath.Abs("../../scripts/chart-check.sh")
	if err != nil {
		t.Fatal(err)
	}
	run := func(chart string) (int, string, string) {
		cmd := exec.Command(script, chart)
		cmd.Env = append(os.Environ(), "HELM="+helm)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), stdout.String(), stderr.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, stdout.String(), stderr.String()
	}
	if code, stdout, stderr := run(""); code != 0 || stderr != "" || !strings.Contains(stdout, "renders with 5 example values files") {
		t.Fatalf("the chart: exit %d: %s%s", code, stdout, stderr)
	}
	// (values-a-*: first in the glob's order, so that the check stops at
	// them.)
	for name, tc := range map[string]struct{ body, want string }{
		"values-a-typo.yaml":     {"agent:\n  settings:\n    listn: tcp:0.0.0.0:1\n", "helm lint --strict with %s failed: [ERROR] values.yaml: - at '/agent/settings': additional properties 'listn' not allowed"},
		"values-a-required.yaml": {"oidc:\n  apiURL: \"\"\n", "helm template with %s (Kubernetes 1.25.0) failed: Error: execution error at (signagent/templates/"},
		"values-a-broken.yaml":   {"agent: [\n", "helm lint --strict with %s failed: "},
	} {
		chart := filepath.Join(t.TempDir(), "signagent")
		if err := os.CopyFS(chart, os.DirFS(chartDir)); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(chart, name)
		if err := os.WriteFile(f, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := run(chart)
		want := "chart-check: " + strings.Replace(tc.want, "%s", f, 1)
		if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and one line starting %q", name, code, stdout, stderr, want)
		}
	}
}
