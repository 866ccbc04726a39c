package scripts_test

import (
	"regexp"

	"github.com/rogpeppe/go-internal/testscript"
)

var (
	rfc3339Time = regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[^"]*"`)
	msUTCTime   = regexp.MustCompile(`^"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"$`)
)

// jsonTimes (jsontimes) checks the last command's stdout, a --json
// output: it holds at least one time, and every RFC 3339 time in it is in
// UTC with exactly milliseconds (2026-11-28T17:22:47.123Z), the one
// precision of signagent's JSON, the agent's and the CLI's alike.
func jsonTimes(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: jsontimes")
	}
	out := ts.ReadFile("stdout")
	times := rfc3339Time.FindAllString(out, -1)
	if len(times) == 0 {
		ts.Fatalf("no time in stdout: %s", out)
	}
	for _, t := range times {
		if !msUTCTime.MatchString(t) {
			ts.Fatalf("%s is not RFC 3339 UTC with milliseconds: %s", t, out)
		}
	}
}
