package main

import (
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/benchcmd"
	"github.com/signagent/signagent/cmd/signagent/internal/app"
)

// TestDocCommands: every signagent command line shown in the README and
// docs/ (in a fenced block) names a command that exists and only flags
// that command takes, so that the documentation cannot drift from the
// program. (The generated docs/cli.md is the help itself.) It checks the
// lines, it does not run them: the demo and the scripts run the flows.
func TestDocCommands(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	checked := 0
	appFor := appsFor()
	for _, file := range files {
		if filepath.Base(file) == "cli.md" {
			continue
		}
		for _, l := range commandLines(t, file, true) {
			checked++
			if msg := checkDocCommand(appFor(l.cmd[0]), l.cmd); msg != "" {
				t.Errorf("%s:%d: %s: %s", strings.TrimPrefix(file, "../../"), l.n, strings.Join(l.cmd, " "), msg)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d command lines found in the docs: the scan is broken", checked)
	}
	t.Logf("%d signagent command lines checked", checked)
}

// appsFor returns the program a documented command line runs, signagent
// or signagent-bench, each built once: the tests only read their commands
// and flags, and building the whole CLI for each of some hundred lines
// took minutes under the race detector.
func appsFor() func(program string) *cli.App {
	apps := map[string]*cli.App{}
	return func(program string) *cli.App {
		if a, ok := apps[program]; ok {
			return a
		}
		a := app.NewApp(strings.NewReader(""), io.Discard, io.Discard)
		if program == "signagent-bench" {
			a = benchcmd.NewApp(strings.NewReader(""), io.Discard, io.Discard)
		}
		apps[program] = a
		return a
	}
}

// signagentLines finds the signagent (and signagent-bench) invocations in
// a shell line: the words from the program's name to the end of its
// simple command.
func signagentLines(line string) [][]string {
	words := shellWords(line)
	var out [][]string
	for i := 0; i < len(words); i++ {
		w := strings.TrimPrefix(strings.TrimPrefix(words[i], "$("), "\"$(")
		if w != "signagent" && w != "signagent-bench" || (i > 0 && words[i-1] == "-u") { // sudo -u signagent signagent ...
			continue
		}
		j := i + 1
		for j < len(words) && !slices.Contains([]string{"|", "||", "&&", ";", "&", ">", "2>", ">>", "<", "#"}, words[j]) &&
			!strings.HasPrefix(words[j], "#") && !strings.HasPrefix(words[j], ">") && !strings.HasPrefix(words[j], "2>") {
			j++
		}
		cmd := []string{w}
		for _, w := range words[i+1 : j] {
			cmd = append(cmd, strings.TrimRight(w, ")\"&"))
		}
		out = append(out, cmd)
		i = j
	}
	return out
}

// shellWords splits a line into words as a shell would, roughly: quotes
// group, operators stand alone.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	for _, r := range s {
		if quote == 0 && r == '#' && cur.Len() == 0 {
			break // a comment: the rest of the line is prose
		}
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote = r
		case r == ' ' || r == '\t':
			flush()
		case r == '|' || r == ';':
			flush()
			out = append(out, string(r))
		default:
			cur.WriteRune(r)
		}
	}
	flush()
	return out
}

// checkDocCommand says what is wrong with one shown command: an unknown
// command or a flag it does not take ("" when none).
func checkDocCommand(app *cli.App, args []string) string {
	flags := app.Flags
	cmds := app.Commands
	var path []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		if strings.Contains(a, "...") || strings.ContainsAny(a, "[]") || strings.ToUpper(a) == a && len(a) > 1 && !strings.HasPrefix(a, "-") {
			return "" // a placeholder (COMMAND, [--json], ...): the rest is a pattern, not a command
		}
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, hasValue := strings.Cut(name, "=")
			if !plainName(name) {
				return "" // not a command: a program's output shown (signagent-bench --soak: ...)
			}
			fl := findFlag(flags, name)
			if fl == nil && len(path) > 0 {
				// A flag of the program given after the command.
				fl = findFlag(app.Flags, name)
			}
			if fl == nil {
				return "unknown flag --" + name + " for " + strings.Join(append([]string{args[0]}, path...), " ")
			}
			if takesValue(fl) && !hasValue {
				i++
			}
			continue
		}
		if strings.HasPrefix(a, "-") {
			if fl := findFlag(flags, strings.TrimPrefix(a, "-")); fl != nil && takesValue(fl) {
				i++
			}
			continue
		}
		if len(path) == 0 && !plainName(a) {
			return "" // output, such as the version line (signagent v1.2.3 ...)
		}
		if c := findCommand(cmds, a); c != nil {
			path = append(path, c.Name)
			flags, cmds = c.Flags, c.Subcommands
			continue
		}
		if len(path) == 0 {
			return "unknown command " + a
		}
		if len(cmds) > 0 && !slices.Contains([]string{"api", "completion", "help"}, path[0]) {
			return "unknown subcommand " + a + " of " + strings.Join(path, " ")
		}
		// A positional argument (api's path, completion's shell).
	}
	return ""
}

// plainName is a word a command or flag name could be.
func plainName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') })
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	if name == "help" || name == "h" {
		return cli.HelpFlag
	}
	return nil
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name || slices.Contains(c.Aliases, name) {
			return c
		}
	}
	return nil
}

func takesValue(f cli.Flag) bool {
	d, ok := f.(cli.DocGenerationFlag)
	return ok && d.TakesValue()
}
