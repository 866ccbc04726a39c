package main

import (
	"bytes"
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
)

func TestReadBuildInfo(t *testing.T) {
	t.Parallel()
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	for name, tc := range map[string]struct {
		ldflags string
		commit  string
		info    *debug.BuildInfo
		ok      bool
		want    string
	}{
		"go install @v1.2.3":      {"dev", "", stamped, true, "signagent v1.2.3 (0123456789ab-dirty) go1.26.8 "},
		"make build":              {"v1.2.4-3-gabc", "", stamped, true, "signagent v1.2.4-3-gabc (0123456789ab-dirty) go1.26.8 "},
		"go build in the tree":    {"dev", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true, "signagent dev go1.26.8 "},
		"no build info (a fault)": {"dev", "", nil, false, "signagent dev go"},
		// A build from a source archive: no VCS stamp, the commit from
		// -ldflags -X main.commit.
		"make build from an archive": {"v1.2.4", "fedcba9876543210fedc", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true, "signagent v1.2.4 (fedcba987654) go1.26.8 "},
		"the ldflag over the stamp":  {"v1.2.4", "fedcba9876543210fedc", stamped, true, "signagent v1.2.4 (fedcba987654-dirty) go1.26.8 "},
	} {
		if got := cmdutil.ReadBuildInfo(tc.ldflags, tc.commit, tc.info, tc.ok).String(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want prefix %q", name, got, tc.want)
		}
	}
}

// TestVersionAndUnknownCommands: version and --version print the build,
// --json as JSON; an unknown command or flag is one line naming the one
// meant when one is close, exit 2; -v is not --version.
func TestVersionAndUnknownCommands(t *testing.T) {
	t.Parallel()
	do := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"signagent"}, args...), strings.NewReader(""), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, _ := do("version", "--json")
	var b cmdutil.BuildInfo
	if err := json.Unmarshal([]byte(out), &b); code != 0 || err != nil || b.Version == "" || !strings.HasPrefix(b.GoVersion, "go") || !strings.Contains(b.Platform, "/") ||
		b.StoreFormats.Write != 2 || len(b.StoreFormats.Read) < 2 || b.StoreFormats.Read[0] != 1 || b.StoreFormats.Read[1] != 2 {
		t.Fatalf("version --json: %d %q %v", code, out, err)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if code, out, _ := do(args...); code != 0 || !strings.HasPrefix(out, "signagent "+b.Version+" ") {
			t.Errorf("%v: %d %q", args, code, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sesion"}, `signagent: "sesion" is not a signagent command; did you mean "trusted session"? (signagent --help lists them)` + "\n"},
		{[]string{"xyzzy"}, `signagent: "xyzzy" is not a signagent command (signagent --help lists them)` + "\n"},
		{[]string{"trusted", "sign", "--phon", "9161234567"}, `signagent: flag provided but not defined: -phon; did you mean "--phone"?` + "\n"},
		{[]string{"-v"}, "signagent: flag provided but not defined: -v\n"},
		{[]string{"version", "--jsn"}, `signagent: flag provided but not defined: -jsn; did you mean "--json"?` + "\n"},
	} {
		if code, out, errOut := do(tc.args...); code != cmdutil.ExitBadInput || out != "" || errOut != tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
}
