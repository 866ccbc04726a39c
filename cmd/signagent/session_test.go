package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/hsmtest"
)

// TestSessionSignatureReused: when the service refuses a step-1 signature
// as one it has already seen (another process signed the same text in the
// same second), `signagent session --attempts 1` exits 6 with one line that
// says so and to retry after a second, not "a required parameter is
// missing"; with the default attempts it signs again a second later and
// succeeds. The emulator is told to answer SignatureReused (a fault): two
// real processes meet in one second only by chance, and this binary under
// -race spends about a second probing the module; package trusted's
// TestSignatureReusedNamedPlainly makes the real collision.
func TestSessionSignatureReused(t *testing.T) {
	tk := hsmtest.New(t)
	emu, err := emulator.New(&emulator.Config{
		Partners: []emulator.Partner{{Name: "p", APIKey: testAPIKey, Certificates: []string{string(hsmtest.PEM(tk.RSA.Cert))}}},
		Users:    []emulator.User{{ID: "u1", Phone: "9161234567", Linked: []string{"p:crm-42"}}},
	}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.Start(); err != nil {
		t.Fatal(err)
	}
	defer emu.Close(context.Background())
	t.Setenv("SIGNAGENT_API_KEY", testAPIKey)
	session := func(extra ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		args := append([]string{"signagent", "session", "--phone", "9161234567", "--service-user-id", "crm-42", "--base-url", emu.URL(),
			"--module", tk.Module, "--token-label", tk.Label, "--key-label", tk.RSA.Label, "--pin-file", tk.PINFile, "--log-level", "error"}, extra...)
		code := run(args, strings.NewReader(""), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	reused := emulator.Fault{Status: 400, Code: emulator.CodeSignatureReused}

	emu.InjectFaults("authenticate-by-truster", reused)
	code, stdout, stderr := session("--attempts", "1")
	want := "signagent: authenticate-by-truster: the service answered HTTP 400 SignatureReused: the service refused a signature it had already seen: " +
		"another process signed the same text (this API key and credential, the same second) a moment ago; try again after a second\n"
	if code != exitRetry || stderr != want || stdout != "" {
		t.Fatalf("exit %d (want %d), stderr %q, stdout %q", code, exitRetry, stderr, stdout)
	}

	emu.InjectFaults("authenticate-by-truster", reused)
	if code, stdout, stderr := session(); code != exitOK || len(strings.TrimSpace(stdout)) != 43 {
		t.Fatalf("with retries: exit %d, %q %s", code, stdout, stderr)
	}
	if n := emu.Stats().Requests["authenticate-by-truster"]; n != 3 {
		t.Fatalf("%d step-1 requests, want 3 (one refused, one refused then signed again)", n)
	}
}
