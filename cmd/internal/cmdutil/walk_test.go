package cmdutil

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// testApp is a small tree like signagent's: a command taking positional
// arguments with a value flag, a bool flag and an alias, and one made of
// subcommands.
func testApp() *cli.App {
	return &cli.App{
		Name:  "signagent",
		Flags: LogFlags(""),
		Commands: []*cli.Command{
			{Name: "api", Args: true, Flags: []cli.Flag{
				OneOf(&cli.StringFlag{Name: "scheme", Value: "oidc"}, "oidc", "legacy", "trusted"),
				&cli.BoolFlag{Name: "include", Aliases: []string{"i"}},
				&cli.StringFlag{Name: "context"},
				&cli.StringFlag{Name: "config"},
			}},
			{Name: "config", Subcommands: []*cli.Command{
				ArgValues(&cli.Command{Name: "use-context", Flags: []cli.Flag{&cli.StringFlag{Name: "config"}}}, ContextNames),
				{Name: "view"},
				{Name: "secret", Hidden: true},
			}},
		},
	}
}

func TestFlagsFirst(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		// gh's order: flags after the path.
		{"signagent api /GetMyOrganizations --scheme oidc", "signagent api --scheme oidc /GetMyOrganizations"},
		{"signagent api GET /x -i --scheme=legacy", "signagent api -i --scheme=legacy GET /x"},
		// A value that looks like a path stays its flag's.
		{"signagent api /x --config /etc/c.yaml", "signagent api --config /etc/c.yaml /x"},
		// After --, everything is positional and stays in place.
		{"signagent api /x -- --scheme", "signagent api -- /x --scheme"},
		{"signagent api --scheme legacy /x", "signagent api --scheme legacy /x"},
		// Subcommands: each command's flags before its subcommand's.
		{"signagent config use-context prod --config c.yaml", "signagent config use-context --config c.yaml prod"},
		// The program's own flags and a word that is no command: as given.
		{"signagent --log-level debug nosuch --x", "signagent --log-level debug nosuch --x"},
	} {
		got := strings.Join(FlagsFirst(testApp(), strings.Fields(c.in)), " ")
		if got != c.want {
			t.Errorf("FlagsFirst(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func complete(t *testing.T, line ...string) []string {
	t.Helper()
	var b strings.Builder
	Complete(testApp(), line, &b)
	return strings.Fields(b.String())
}

func TestComplete(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("contexts:\n  prod: {}\n  staging: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SIGNAGENT_CONFIG", cfg)
	for _, c := range []struct {
		line []string
		want string
	}{
		{[]string{""}, "api config"},
		{[]string{"co"}, "config"},
		// Flags after --: all of them, the long way, and no -h.
		{[]string{"api", "--"}, "--scheme --include --context --config --help"},
		{[]string{"api", "-"}, "--scheme --include -i --context --config --help"},
		{[]string{"api", "--sc"}, "--scheme"},
		// A flag's values: its choices, the settings file's contexts.
		{[]string{"api", "--scheme", ""}, "oidc legacy trusted"},
		{[]string{"api", "--scheme", "l"}, "legacy"},
		{[]string{"api", "--context", ""}, "prod staging"},
		{[]string{"api", "--context", "s"}, "staging"},
		// Subcommands (not the hidden ones, not help), then their arguments.
		{[]string{"config", ""}, "use-context view"},
		{[]string{"config", "use-context", ""}, "prod staging"},
		// After a real --, no flags are offered.
		{[]string{"api", "--", "/x", "-"}, ""},
		// After a positional argument, no subcommands.
		{[]string{"api", "/x", ""}, ""},
	} {
		if got := strings.Join(complete(t, c.line...), " "); got != c.want {
			t.Errorf("Complete(%q) = %q, want %q", c.line, got, c.want)
		}
	}
	// --config in the line names the file whose contexts are offered.
	other := filepath.Join(dir, "other.yaml")
	os.WriteFile(other, []byte("contexts:\n  lab: {}\n"), 0o600)
	if got := complete(t, "config", "use-context", "--config", other, ""); !slices.Equal(got, []string{"lab"}) {
		t.Errorf("contexts of --config: %q", got)
	}
}

func TestBadChoice(t *testing.T) {
	err := BadChoice("scheme", "lgacy", []string{"oidc", "legacy", "trusted"})
	if want := `--scheme "lgacy": want oidc, legacy or trusted; did you mean "legacy"?`; err.Error() != want || ExitCode(err) != ExitBadInput {
		t.Fatalf("%v (exit %d), want %q", err, ExitCode(err), want)
	}
	if err := BadChoice("scheme", "kerberos", []string{"oidc", "legacy"}); strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("a guess for a word close to none: %v", err)
	}
}
