package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
)

// linkedEmulator starts an emulator that trusts the test token's RSA
// certificate, with user 9161234567 linked as crm-42.
func linkedEmulator(t *testing.T) (*pkcs11test.Token, *emulator.Server) {
	t.Helper()
	tk := pkcs11test.New(t)
	emu := linkedTo(t, tk)
	t.Setenv("SIGNAGENT_API_KEY", testAPIKey)
	return tk, emu
}

// linkedTo starts an emulator that trusts tk's RSA certificate, with user
// 9161234567 linked as crm-42.
func linkedTo(t *testing.T, tk *pkcs11test.Token) *emulator.Server {
	t.Helper()
	return startEmulator(t, &emulator.Config{
		Partners: []emulator.Partner{{Name: "p", APIKey: testAPIKey, Certificates: []string{string(signertest.PEM(tk.RSA.Cert))}}},
		Users:    []emulator.User{{ID: "u1", Phone: "9161234567", Linked: []string{"p:crm-42"}}},
	})
}

// runSession runs `signagent trusted session` for crm-42 in process.
func runSession(tk *pkcs11test.Token, emu *emulator.Server, logLevel string, extra ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	args := append([]string{"signagent", "--log-level", logLevel, "trusted", "session", "--phone", "9161234567", "--service-user-id", "crm-42", "--trusted-url", emu.URL(),
		"--module", tk.Module, "--token-label", tk.Label, "--key-label", tk.RSA.Label, "--pin-file", tk.PINFile}, extra...)
	code := run(args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestSessionSignatureReused: when the service refuses a step-1 signature
// as one it has already seen (another process signed the same text in the
// same second), `signagent trusted session --attempts 1` exits 6 with one line that
// says so and to retry after a second, not "a required parameter is
// missing"; with the default attempts it signs again a second later and
// succeeds. The emulator is told to answer SignatureReused (a fault): two
// real processes meet in one second only by chance, and this binary under
// -race spends about a second probing the module; package trusted's
// TestSignatureReusedNamedPlainly makes the real collision.
func TestSessionSignatureReused(t *testing.T) {
	tk, emu := linkedEmulator(t)
	session := func(extra ...string) (int, string, string) {
		return runSession(tk, emu, "error", extra...)
	}
	reused := emulator.Fault{Status: 400, Code: emulator.CodeSignatureReused}

	emu.InjectFaults("authenticate-by-truster", reused)
	code, stdout, stderr := session("--attempts", "1")
	want := "signagent: authenticate-by-truster: the service answered HTTP 400 SignatureReused: the service refused a signature it had already seen: " +
		"another process signed the same text (this API key and credential, the same second) a moment ago; try again after a second\n"
	if code != cmdutil.ExitRetry || stderr != want || stdout != "" {
		t.Fatalf("exit %d (want %d), stderr %q, stdout %q", code, cmdutil.ExitRetry, stderr, stdout)
	}

	emu.InjectFaults("authenticate-by-truster", reused)
	if code, stdout, stderr := session(); code != cmdutil.ExitOK || len(strings.TrimSpace(stdout)) != 43 {
		t.Fatalf("with retries: exit %d, %q %s", code, stdout, stderr)
	}
	if n := emu.Stats().Requests["authenticate-by-truster"]; n != 3 {
		t.Fatalf("%d step-1 requests, want 3 (one refused, one refused then signed again)", n)
	}
}

// TestSessionStaleTimestamp: a service whose clock is 10 minutes ahead
// refuses the step-1 timestamp as stale; the one line says it is this
// machine's clock and by how much (from the answer's Date), and how to set
// it, not "a required parameter is missing or malformed".
func TestSessionStaleTimestamp(t *testing.T) {
	tk, emu := linkedEmulator(t)
	emu.SetClock(func() time.Time { return time.Now().Add(10 * time.Minute) })
	code, stdout, stderr := runSession(tk, emu, "error")
	// Date is to the second: the request may cross one.
	want := regexp.MustCompile(`^signagent: authenticate-by-truster: the service answered HTTP 400 StaleTimestamp: the service found the signed timestamp too far from its clock: ` +
		`this machine's clock is 10m[01]s behind the service's; set it right \(timedatectl set-ntp true, or chronyc makestep\)\n$`)
	if code != cmdutil.ExitRefused || !want.MatchString(stderr) || stdout != "" {
		t.Fatalf("exit %d (want %d), stderr %q, stdout %q", code, cmdutil.ExitRefused, stderr, stdout)
	}
}

// TestSessionTooManyRequests: a 429 is retried after the wait its
// Retry-After asks for, and one that outlives the retries exits 4 (the
// service is limiting requests: try later), not 3 (refused); "retrying" is
// logged once per retry that follows, never after the last attempt. The
// emulator answers 429 on cue (a fault): it has no rate limit of its own.
func TestSessionTooManyRequests(t *testing.T) {
	tk, emu := linkedEmulator(t)
	session := func(extra ...string) (int, string, string) {
		return runSession(tk, emu, "warn", extra...)
	}
	limited := emulator.Fault{Status: 429, Code: "TooManyRequests", RetryAfter: "1"}

	// 429 asking for a second, then served.
	emu.InjectFaults("authenticate-by-truster", limited)
	code, stdout, stderr := session()
	if code != cmdutil.ExitOK || len(strings.TrimSpace(stdout)) != 43 {
		t.Fatalf("after one 429: exit %d, %q %s", code, stdout, stderr)
	}
	if n := strings.Count(stderr, "request failed; retrying"); n != 1 || !strings.Contains(stderr, "wait=1s") {
		t.Fatalf("want one retry line waiting the 1s asked for:\n%s", stderr)
	}

	// 429 on every attempt: exit 4, one error line, a retry line only
	// between attempts.
	emu.InjectFaults("authenticate-by-truster", limited, limited)
	code, stdout, stderr = session("--attempts", "2")
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	errLines := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "signagent: ") {
			errLines++
		}
	}
	if code != cmdutil.ExitTransport || stdout != "" || errLines != 1 || !strings.Contains(stderr, "HTTP 429") ||
		strings.Count(stderr, "request failed; retrying") != 1 {
		t.Fatalf("429 twice with 2 attempts: exit %d (want %d), stdout %q, stderr:\n%s", code, cmdutil.ExitTransport, stdout, stderr)
	}
}

// startEmulator starts an emulator of cfg on loopback, closed when the
// test ends.
func startEmulator(t testing.TB, cfg *emulator.Config) *emulator.Server {
	t.Helper()
	return emulatortest.New(t, cfg).Server
}

// makeStoreKey makes a shared store's key file at path with the binary's
// store-key command.
func makeStoreKey(t testing.TB, path string) {
	t.Helper()
	if code, stderr, _ := runBinary(t, signagent(t, nil, "store-key", "--out", path)); code != 0 {
		t.Fatalf("store-key: %d %s", code, stderr)
	}
}
