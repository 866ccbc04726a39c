package main

import (
	"io"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestFlagPlaceholders: every flag that takes a value names it in its help
// (a `WORD` in the usage becomes the placeholder), so that no help line
// reads "--hash value".
func TestFlagPlaceholders(t *testing.T) {
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	check := func(where string, flags []cli.Flag) {
		for _, f := range flags {
			if _, isBool := f.(*cli.BoolFlag); isBool {
				continue
			}
			d, ok := f.(cli.DocGenerationFlag)
			if !ok {
				continue
			}
			if !strings.Contains(d.GetUsage(), "`") {
				t.Errorf("%s --%s: its usage names no placeholder (`WORD`): %q", where, f.Names()[0], d.GetUsage())
			}
		}
	}
	check("signagent", app.Flags)
	for _, c := range app.Commands {
		check(c.Name, c.Flags)
	}
}

// TestRootHelpGroups: the root help lists the commands by job, in the
// order a newcomer meets them, and every command is in a group.
func TestRootHelpGroups(t *testing.T) {
	var out strings.Builder
	if code := run([]string{"signagent", "--help"}, strings.NewReader(""), &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	help := out.String()
	last := -1
	for _, g := range []string{"Auth.sid by trusted authentication:", "Business calls and the legacy scheme:", "OpenID Connect sign-in:",
		"Running the agent:", "Smart cards and tokens:", "This program:"} {
		i := strings.Index(help, "\n   "+g+"\n")
		if i < 0 || i < last {
			t.Fatalf("the group %q is missing or out of order:\n%s", g, help)
		}
		last = i
	}
	for _, c := range newApp(strings.NewReader(""), io.Discard, io.Discard).Commands {
		if c.Category == "" && !c.Hidden {
			t.Errorf("command %s is in no group", c.Name)
		}
	}
}
