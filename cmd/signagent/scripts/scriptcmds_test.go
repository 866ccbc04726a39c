package scripts_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/rs/zerolog"

	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
	"github.com/signagent/signagent/emulator"
)

// scriptCmds are the scripts' own commands, in place of shell one-liners
// repeated in each script:
//
//	waitfile [-socket|-exists] FILE
//	waitlines N REGEXP FILE
//	emulator [-restart|-stop] [FILE [VAR...]]
//	serve [-live] NAME ARGS... | serve -stop NAME
//	approve-device [-deny] FILE LOGIN PASSWORD
//	exitcode N PROGRAM [ARGS...]
//	envfile VAR FILE
//	jsontimes
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"waitfile":       waitFile,
	"waitlines":      waitLines,
	"emulator":       emulatorCmd,
	"serve":          serveCmd,
	"approve-device": approveDevice,
	"exitcode":       expectExit,
	"envfile":        envFile,
	"jsontimes":      jsonTimes,
}

// patience bounds every wait of the script commands: what they wait for
// comes in a second or two, but a race-built binary on a loaded two-core
// machine can take many times that, and a wait ends as soon as it is met.
const patience = 30 * time.Second

// scriptState is what a script's commands keep between lines.
type scriptState struct {
	emu      *emulator.Server
	emuAddr  string
	emuFile  string
	emuVars  []string
	emuClose func()
}

type scriptStateKey struct{}

func stateOf(ts *testscript.TestScript) *scriptState {
	return ts.Value(scriptStateKey{}).(*scriptState)
}

// expectExit is exitcode N PROGRAM [ARGS...]: it runs PROGRAM as exec does
// (its stdout and stderr kept for the stdout and stderr commands after it)
// and wants its exit status to be exactly N, where exec wants 0 and ! exec
// anything else. A program that cannot be started fails the script, as does
// one killed by a signal. A variable for the one program is given as
// exitcode N env VAR=value PROGRAM ..., env -u VAR for one unset.
func expectExit(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exitcode (say the status wanted)")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exitcode N PROGRAM [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil || want < 0 || want > 255 {
		ts.Fatalf("exitcode: %q is not an exit status", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() < 0 {
			ts.Fatalf("%s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// envFile is envfile VAR FILE: it sets VAR to FILE's content less its
// trailing newline (an address a server wrote), for the commands after it.
func envFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: envfile VAR FILE")
	}
	ts.Setenv(args[0], strings.TrimRight(ts.ReadFile(args[1]), "\n"))
}

// waitFile is waitfile [-socket|-exists] FILE: it waits up to 30 s for
// FILE to be there, non-empty (an address file a server writes once it
// listens), a socket (-socket) or merely existing (-exists).
func waitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! waitfile")
	}
	what := "non-empty"
	if len(args) == 2 && (args[0] == "-socket" || args[0] == "-exists") {
		what, args = args[0][1:], args[1:]
	}
	if len(args) != 1 {
		ts.Fatalf("usage: waitfile [-socket|-exists] FILE")
	}
	path := ts.MkAbs(args[0])
	ready := func() bool {
		st, err := os.Stat(path)
		switch {
		case err != nil:
			return false
		case what == "socket":
			return st.Mode()&os.ModeSocket != 0
		case what == "exists":
			return true
		}
		return st.Size() > 0
	}
	if !clitest.Poll(patience, ready) {
		ts.Fatalf("gave up waiting for %s to be %s", args[0], what)
	}
}

// waitLines waits until FILE has exactly N lines matching REGEXP: the
// running agent's audit log, which it writes a moment after the answer
// (its writer does not hold up the request).
func waitLines(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: waitlines N REGEXP FILE")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("waitlines: N: %v", err)
	}
	re, err := regexp.Compile(args[1])
	if err != nil {
		ts.Fatalf("waitlines: %v", err)
	}
	count := func() int {
		b, _ := os.ReadFile(ts.MkAbs(args[2]))
		c := 0
		for _, l := range strings.Split(string(b), "\n") {
			if re.MatchString(l) {
				c++
			}
		}
		return c
	}
	if !clitest.Poll(patience, func() bool { return count() >= n }) {
		ts.Fatalf("%s has %d lines matching %q, want %d", args[2], count(), args[1], n)
	}
	if c := count(); c != n {
		ts.Fatalf("%s has %d lines matching %q, want %d", args[2], c, args[1], n)
	}
}

// emulatorCmd is emulator FILE [VAR...]: it serves the emulator configured
// by FILE on a loopback port for the rest of the script (its log in
// emulator.log), and sets $EMU_URL and each VAR (SIGNAGENT_BUSINESS_URL, ...)
// to its address. emulator -restart starts it again from FILE on the same
// address with nothing remembered (a service that forgot its tokens);
// emulator -stop stops it (a service that went away).
func emulatorCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! emulator")
	}
	st := stateOf(ts)
	switch {
	case len(args) == 1 && args[0] == "-stop":
		if st.emuClose == nil {
			ts.Fatalf("emulator -stop: no emulator is running")
		}
		st.emuClose()
		return
	case len(args) == 1 && args[0] == "-restart":
		if st.emuFile == "" {
			ts.Fatalf("emulator -restart: no emulator was started")
		}
		if st.emuClose != nil {
			st.emuClose()
		}
		serveEmulator(ts, st, st.emuAddr)
		return
	case len(args) == 0 || strings.HasPrefix(args[0], "-"):
		ts.Fatalf("usage: emulator [-restart|-stop] [FILE [VAR...]]")
	}
	if st.emuClose != nil {
		ts.Fatalf("emulator: one is already running")
	}
	st.emuFile, st.emuVars = ts.MkAbs(args[0]), args[1:]
	serveEmulator(ts, st, "127.0.0.1:0")
	for _, v := range append([]string{"EMU_URL"}, st.emuVars...) {
		ts.Setenv(v, st.emu.URL())
	}
}

func serveEmulator(ts *testscript.TestScript, st *scriptState, addr string) {
	cfg, err := emulator.LoadConfig(st.emuFile)
	ts.Check(err)
	logf, err := os.OpenFile(ts.MkAbs("emulator.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	ts.Check(err)
	srv, err := emulator.New(cfg, zerolog.New(logf).With().Timestamp().Logger())
	ts.Check(err)
	ts.Check(srv.Listen(addr))
	u, err := url.Parse(srv.URL())
	ts.Check(err)
	st.emu, st.emuAddr = srv, u.Host
	closed := false
	st.emuClose = func() {
		if !closed {
			closed = true
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Close(ctx)
			logf.Close()
			st.emuClose = nil
		}
	}
	stop := st.emuClose
	ts.Defer(func() { stop() })
}

// serveCmd is serve NAME ARGS...: it starts signagent serve ARGS... in the
// background (its output in NAME.out, its pid in NAME.pid) and waits until
// the agent is ready: /readyz, or /healthz with -live, answers 200 on the
// first unix: --listen of ARGS. An agent that exits first fails the
// script with its output. serve -stop NAME interrupts it (SIGINT) and
// waits for it to exit, which must be 0 (with !, must not be).
func serveCmd(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 2 && args[0] == "-stop" {
		code := stopAgent(ts, args[1])
		if (code == 0) == neg {
			ts.Fatalf("agent %s exited %d\n%s", args[1], code, ts.ReadFile(args[1]+".out"))
		}
		return
	}
	if neg {
		ts.Fatalf("unsupported: ! serve (the agent must start; use exec for one that must not)")
	}
	probe := "/readyz"
	if len(args) > 0 && args[0] == "-live" {
		probe, args = "/healthz", args[1:]
	}
	if len(args) < 1 || strings.HasPrefix(args[0], "-") {
		ts.Fatalf("usage: serve [-live] NAME ARGS... | serve -stop NAME")
	}
	name, args := args[0], args[1:]
	sock := ""
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--listen=")
		if !ok && a == "--listen" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if p, unix := strings.CutPrefix(v, "unix:"); ok && unix && sock == "" {
			sock = ts.MkAbs(p)
		}
	}
	if sock == "" {
		ts.Fatalf("serve: give --listen unix:PATH, to wait on")
	}
	// The script's environment is the agent's: started from a shell that
	// puts it in the background, as an operator would.
	sh := `( signagent serve "$@" > "$0.out" 2>&1 & p=$!; echo $p > "$0.pid"; wait $p; echo $? > "$0.exit" ) > /dev/null 2>&1 &`
	ts.Check(ts.Exec("sh", append([]string{"-c", sh, name}, args...)...))
	ts.Defer(func() {
		if pid := agentPID(ts, name); pid > 0 && !exists(ts.MkAbs(name+".exit")) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	ready := clitest.Poll(patience, func() bool {
		if exists(ts.MkAbs(name + ".exit")) {
			return true
		}
		resp, err := client.Get("http://agent" + probe)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if exists(ts.MkAbs(name + ".exit")) {
		ts.Fatalf("agent %s exited before it was ready:\n%s", name, ts.ReadFile(name+".out"))
	}
	if !ready {
		ts.Fatalf("agent %s: %s did not answer 200 within 15s:\n%s", name, probe, ts.ReadFile(name+".out"))
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func agentPID(ts *testscript.TestScript, name string) int {
	b, err := os.ReadFile(ts.MkAbs(name + ".pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// stopAgent interrupts agent name and returns its exit status.
func stopAgent(ts *testscript.TestScript, name string) int {
	pid := agentPID(ts, name)
	if pid <= 0 {
		ts.Fatalf("serve -stop: no agent %s was started", name)
	}
	exit := ts.MkAbs(name + ".exit")
	if !exists(exit) {
		syscall.Kill(pid, syscall.SIGINT)
	}
	if !clitest.Poll(patience, func() bool {
		b, err := os.ReadFile(exit)
		return err == nil && len(b) > 0
	}) {
		syscall.Kill(pid, syscall.SIGKILL)
		ts.Fatalf("agent %s did not stop within 15s of SIGINT", name)
	}
	code, err := strconv.Atoi(strings.TrimSpace(ts.ReadFile(name + ".exit")))
	ts.Check(err)
	return code
}

var userCode = regexp.MustCompile(`enter the code ([A-Z]+)`)

// approveDevice is approve-device [-deny] FILE LOGIN PASSWORD: it waits up
// to 10 s for signagent oidc login's instructions in FILE, then answers the
// emulator's /device page at $SIGNAGENT_OIDC_URL as the user would, with
// LOGIN and PASSWORD, allowing (or denying) the code; the page must
// answer 200.
func approveDevice(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! approve-device")
	}
	decision := "allow"
	if len(args) > 0 && args[0] == "-deny" {
		decision, args = "deny", args[1:]
	}
	if len(args) != 3 {
		ts.Fatalf("usage: approve-device [-deny] FILE LOGIN PASSWORD")
	}
	var code string
	if !clitest.Poll(patience, func() bool {
		b, _ := os.ReadFile(ts.MkAbs(args[0]))
		m := userCode.FindSubmatch(b)
		if m != nil {
			code = string(m[1])
		}
		return m != nil
	}) {
		ts.Fatalf("no user code in %s within 10s:\n%s", args[0], ts.ReadFile(args[0]))
	}
	base := ts.Getenv("SIGNAGENT_OIDC_URL")
	if base == "" {
		ts.Fatalf("approve-device: SIGNAGENT_OIDC_URL is not set")
	}
	resp, err := http.PostForm(strings.TrimRight(base, "/")+"/device",
		url.Values{"user_code": {code}, "login": {args[1]}, "password": {args[2]}, "decision": {decision}})
	ts.Check(err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		ts.Fatalf("the /device page answered %d", resp.StatusCode)
	}
}
