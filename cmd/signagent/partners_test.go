package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
)

// The identity the partner examples ask for: a user the emulator knows,
// linked to partnerUser, with a box of an organization.
const (
	partnerPhone = "9161234567"
	partnerUser  = "crm-42"
	partnerBox   = "5c7a41b2-3f0e-4d8a-9b6c-2e1f0a3d4c5b"
)

// partnerBed is a `signagent serve` against the emulator, on a Unix socket
// and a loopback port with a bearer token, as a partner system finds it:
// the token (SoftHSM), the API key, the legacy scheme's developer key, and
// the legacy header exposed so that the examples' authorization is served.
type partnerBed struct {
	*agentProc
	emu    *emulator.Server
	tk     *pkcs11test.Token
	url    string // http://127.0.0.1:PORT
	bearer string // the bearer token's file
	dir    string
}

func newPartnerBed(t *testing.T, args ...string) *partnerBed {
	t.Helper()
	tk := procToken(t)
	emu := startEmulator(t, &emulator.Config{
		Partners:   []emulator.Partner{{Name: "p", APIKey: testAPIKey, Certificates: []string{string(signertest.PEM(tk.RSA.Cert))}, CanLinkByPhone: true}},
		Developers: []emulator.Developer{{Name: "crm", Key: "testClient-0a1b2c3d4e"}},
		Users: []emulator.User{{ID: "u1", Phone: partnerPhone, Linked: []string{"p:" + partnerUser}, Boxes: []string{partnerBox},
			Thumbprints: []string{canonical.ThumbprintOf(tk.RSA.Cert)}}},
		Organizations: []emulator.Organization{{ID: "org-1", Inn: "6663003127", FullName: "Horns and Hooves LLC", ShortName: "Horns and Hooves",
			Boxes: []emulator.Box{{GUID: partnerBox, Domain: "service.example", Title: "Main"}}}},
	})
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	b := &partnerBed{emu: emu, tk: tk, bearer: filepath.Join(dir, "bearer"), dir: dir}
	env := append(serveEnv(tk), "SIGNAGENT_DEVELOPER_KEY=testClient-0a1b2c3d4e", "XDG_STATE_HOME="+dir)
	b.agentProc = startServe(t, signagent(t, env, append([]string{"serve", "--listen", "unix:" + sock,
		"--listen", "tcp:127.0.0.1:0", "--bearer-token-file", b.bearer, "--audit-log", os.DevNull,
		"--trusted-url", emu.URL(), "--business-url", emu.URL(), "--expose-legacy-header", "--log-level", "info"}, args...)...), sock)
	b.url = "http://" + b.agentProc.tcpAddr(t)
	eventuallyReady(t, b.agentProc)
	return b
}

// example is one partner example: how to run it, and whether it speaks
// over the Unix socket (Python and Node) or TCP alone (Java and C#, whose
// standard HTTP clients have no Unix socket).
type example struct {
	name string
	unix bool
	// build, when set, runs once before the example (into dir) and
	// returns the command line that runs it.
	build func(t *testing.T, dir string) []string
	run   []string
}

// partnerExamples are the examples in examples/, each with the tool that
// runs it (Debian's python3, nodejs, openjdk-17-jdk-headless, mono-devel:
// make test installs them; a missing one fails the test).
var partnerExamples = []example{
	{name: "python", unix: true, run: []string{"python3", "../../examples/python/signagent_example.py"}},
	{name: "node", unix: true, run: []string{"node", "../../examples/node/signagent_example.js"}},
	// java runs a single source file as it is (JEP 330): nothing to build.
	// The client compiler alone and the serial collector, as for any
	// short program: the same run in half the CPU (3.2 s to 1.9 s here),
	// which the tests beside this one on two cores get back.
	{name: "java", run: []string{"java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "../../examples/java/SignagentExample.java"}},
	{name: "csharp", build: func(t *testing.T, dir string) []string {
		exe := filepath.Join(dir, "SignagentExample.exe")
		// The references .NET has by default; mono's mcs needs them named.
		out, err := exec.Command("mcs", "-nologo", "-warnaserror", "-r:System.Net.Http.dll", "-r:System.Runtime.Serialization.dll",
			"-out:"+exe, "../../examples/csharp/SignagentExample.cs").CombinedOutput()
		if err != nil {
			t.Fatalf("mcs: %v\n%s", err, out)
		}
		return []string{"mono", exe}
	}},
}

// exampleLines is what every example prints, in order, for the bed's
// identity: the same six lines in each language.
var exampleLines = []*regexp.Regexp{
	regexp.MustCompile(`^signature: [1-9][0-9]{2,} base64 characters of CMS, signer certificate [0-9A-F]{40}$`),
	regexp.MustCompile(`^session: an auth\.sid of [1-9][0-9]* characters, cached (true|false)$`),
	regexp.MustCompile(`^authorization: a ServiceAuth header of [1-9][0-9]+ characters, expires 20[0-9]{2}-[0-9]{2}-[0-9]{2}T.*Z$`),
	regexp.MustCompile(`^business call: GetMyOrganizations answered 200, 1 organization\(s\)$`),
	regexp.MustCompile(`^business call: GetMyEmployee answered 404 by the service \(X-Service-ErrorCode Http\.NotFound\)$`),
	regexp.MustCompile(`^business call: the agent answered 422 service_refused \(UserNotFound\)$`),
}

// runExample runs an example's command line with env and returns its exit
// status, standard output and standard error.
func runExample(t *testing.T, argv []string, env []string) (int, string, string) {
	t.Helper()
	if _, err := exec.LookPath(argv[0]); err != nil {
		t.Fatalf("%s is not installed: make test installs it (the Makefile's DEPS)", argv[0])
	}
	cmd := exec.Command(argv[0], append(argv[1:], partnerPhone, partnerUser)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stdout.String(), stderr.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

// TestPartnerExamples runs each example of examples/ against a running
// agent and the emulator, over the Unix socket (Python, Node) and over
// TCP with the bearer token from its file (all four): each makes a
// signature, a session, an authorization and three business calls through
// the proxy (the service's answer, the service's refusal, the agent's
// refusal with Signagent-Error), and the agent's caches serve the runs
// after the first (one auth.sid, one legacy login at the emulator in all).
// With a wrong bearer token each example exits 1 with one line naming the
// agent's 401.
func TestPartnerExamples(t *testing.T) {
	t.Parallel()
	b := newPartnerBed(t)
	wrong := filepath.Join(b.dir, "wrong-bearer")
	if err := os.WriteFile(wrong, []byte("not-the-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, ex := range partnerExamples {
		t.Run(ex.name, func(t *testing.T) {
			argv := ex.run
			if ex.build != nil {
				argv = ex.build(t, t.TempDir())
			}
			transports := map[string][]string{"tcp": {"SIGNAGENT_AGENT_URL=" + b.url, "SIGNAGENT_BEARER_TOKEN_FILE=" + b.bearer}}
			if ex.unix {
				transports["unix"] = []string{"SIGNAGENT_AGENT_URL=", "SIGNAGENT_AGENT_SOCK=" + b.sock}
			}
			for name, env := range transports {
				start := time.Now()
				code, stdout, stderr := runExample(t, argv, env)
				runs++
				lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
				if code != 0 || len(lines) != len(exampleLines) {
					t.Fatalf("%s over %s: exit %d, stdout:\n%s\nstderr:\n%s", ex.name, name, code, stdout, stderr)
				}
				for i, re := range exampleLines {
					if !re.MatchString(lines[i]) {
						t.Errorf("%s over %s, line %d: %q does not match %s", ex.name, name, i+1, lines[i], re)
					}
				}
				t.Logf("%s over %s: %v", ex.name, name, time.Since(start).Round(time.Millisecond))
			}
			code, stdout, stderr := runExample(t, argv, []string{"SIGNAGENT_AGENT_URL=" + b.url, "SIGNAGENT_BEARER_TOKEN_FILE=" + wrong})
			if code != 1 || stdout != "" || strings.Count(strings.TrimSuffix(stderr, "\n"), "\n") != 0 ||
				!strings.Contains(stderr, "the agent answered 401 unauthorized") {
				t.Errorf("%s with a wrong bearer token: exit %d (want 1), stdout %q, stderr %q (want one line naming 401 unauthorized)", ex.name, code, stdout, stderr)
			}
		})
	}
	st := b.emu.Stats()
	if st.Sessions != 1 || st.LegacyTokens != 1 || runs != 6 {
		t.Errorf("%d runs made %d auth.sids and %d legacy logins at the emulator, want 6 runs and one of each (the agent's caches)", runs, st.Sessions, st.LegacyTokens)
	}
	if code, _ := b.do(http.MethodGet, "/readyz", ""); code != 200 {
		t.Errorf("/readyz %d after the examples", code)
	}
}
