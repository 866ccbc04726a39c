package main

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// invocation is a command line reduced to what identifies it: the command
// path and the flags given.
type invocation struct {
	path  string
	flags []string
}

// parseInvocation reduces a signagent command line; ok is false for a
// pattern or program output rather than a command.
func parseInvocation(app *cli.App, args []string) (invocation, bool) {
	flags, cmds := app.Flags, app.Commands
	var inv invocation
	var path []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		if strings.Contains(a, "...") || strings.ContainsAny(a, "[]") || strings.ToUpper(a) == a && len(a) > 1 && !strings.HasPrefix(a, "-") {
			return inv, false
		}
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, hasValue := strings.Cut(name, "=")
			fl := findFlag(flags, name)
			if fl == nil {
				fl = findFlag(app.Flags, name)
			}
			if fl == nil {
				return inv, false
			}
			inv.flags = append(inv.flags, fl.Names()[0])
			if takesValue(fl) && !hasValue {
				i++
			}
			continue
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			if fl := findFlag(flags, strings.TrimPrefix(a, "-")); fl != nil {
				inv.flags = append(inv.flags, fl.Names()[0])
				if takesValue(fl) {
					i++
				}
			}
			continue
		}
		if c := findCommand(cmds, a); c != nil {
			path = append(path, c.Name)
			flags, cmds = c.Flags, c.Subcommands
			continue
		}
		if len(path) == 0 && args[0] == "signagent" {
			return inv, false // prose, not a command (signagent-bench takes flags only)
		}
	}
	inv.path = strings.Join(append([]string{args[0]}, path...), " ")
	return inv, true
}

// commandLine is a signagent command found in a file, at line n.
type commandLine struct {
	n   int
	cmd []string
}

// commandLines returns the signagent command lines of a file: in fenced
// blocks of Markdown (fenced false: every line, for scripts), with
// continuation lines joined, and inside `sh -c '...'` too.
func commandLines(t *testing.T, file string, fenced bool) []commandLine {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []commandLine
	sc := bufio.NewScanner(f)
	inBlock, cont, n := !fenced, "", 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if fenced && strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			continue
		}
		if cont != "" {
			line = cont + " " + strings.TrimSpace(line)
			cont = ""
		}
		if strings.HasSuffix(line, "\\") {
			cont = strings.TrimSuffix(line, "\\")
			continue
		}
		line = strings.ReplaceAll(line, "$bin ", "signagent ")         // demo.sh, bench.sh
		line = strings.ReplaceAll(line, "$bench ", "signagent-bench ") // bench.sh
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "serve "); ok && !fenced {
			// the scripts' serve command: serve [-live] NAME ARGS...
			words := strings.Fields(rest)
			if len(words) > 0 && words[0] == "-live" {
				words = words[1:]
			}
			if len(words) > 1 {
				line = "signagent serve " + strings.Join(words[1:], " ")
			}
		}
		words := shellWords(line)
		if !fenced {
			words = append([]string{line}, words...) // sh -c '...' in a script
		} else {
			words = []string{line}
		}
		for _, w := range words {
			if w != line && !strings.Contains(w, "signagent ") && !strings.Contains(w, "signagent-bench ") {
				continue
			}
			for _, cmd := range signagentLines(w) {
				out = append(out, commandLine{n, cmd})
			}
		}
	}
	return out
}

// TestDocCommandsRun: every signagent command shown in the README and
// docs/ is run by a test: a script (testdata/script) or the demo runs the
// same command with at least the flags the documentation shows.
func TestDocCommandsRun(t *testing.T) {
	t.Parallel()
	var runs []invocation
	appFor := appsFor()
	scripts, _ := filepath.Glob("scripts/testdata/script/*.txtar")
	for _, file := range append(scripts, "../../scripts/demo.sh", "../../scripts/bench.sh") {
		for _, l := range commandLines(t, file, false) {
			if inv, ok := parseInvocation(appFor(l.cmd[0]), l.cmd); ok {
				runs = append(runs, inv)
			}
		}
	}
	if len(runs) < 100 {
		t.Fatalf("only %d signagent runs found in the scripts: the scan is broken", len(runs))
	}
	docs, _ := filepath.Glob("../../docs/*.md")
	docs = append(docs, "../../README.md")
	shown, missing := 0, 0
	for _, file := range docs {
		if filepath.Base(file) == "cli.md" {
			continue
		}
		for _, l := range commandLines(t, file, true) {
			inv, ok := parseInvocation(appFor(l.cmd[0]), l.cmd)
			if !ok {
				continue
			}
			shown++
			if !slices.ContainsFunc(runs, func(r invocation) bool { return r.path == inv.path && subset(inv.flags, r.flags) }) {
				missing++
				t.Errorf("%s:%d: %q is run by no script nor the demo", strings.TrimPrefix(file, "../../"), l.n, strings.Join(l.cmd, " "))
			}
		}
	}
	t.Logf("%d commands shown, %d runs in the scripts, %d shown but not run", shown, len(runs), missing)
}

func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
