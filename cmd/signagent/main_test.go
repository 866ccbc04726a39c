package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/app"
	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
)

func TestMain(m *testing.M) {
	testscript.Main(closingChromium{clitest.Isolated{M: m}}, clitest.Commands)
}

// closingChromium runs the tests, then ends the chromium the browser
// tests share.
type closingChromium struct{ clitest.Isolated }

func (c closingChromium) Run() int {
	defer closeChromium()
	return c.Isolated.Run()
}

// run is signagent's main in this process, its streams given.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return app.Run(args, stdin, stdout, stderr)
}

const testAPIKey = "0F6C2E5B-9D4A-4C1E-8A2B-7E3D1F0A9B8C"

// TestBadInput drives every bad input of the sign command in-process against
// a real SoftHSM token: each gives one error line, the right exit status, no
// secret on stderr and no output file.
func TestBadInput(t *testing.T) {
	tk := pkcs11test.New(t)
	dir := t.TempDir()
	wrongPIN := filepath.Join(dir, "wrong-pin")
	os.WriteFile(wrongPIN, []byte("654321\n"), 0o600)
	notModule := filepath.Join(dir, "libnot.so")
	os.WriteFile(notModule, []byte("not a library"), 0o600)
	otherCert := filepath.Join(dir, "other.pem")
	os.WriteFile(otherCert, signertest.PEM(tk.EC.Cert), 0o600)
	emptyKey := filepath.Join(dir, "empty-key")
	os.WriteFile(emptyKey, []byte("\n"), 0o600)
	openKey := filepath.Join(dir, "open-key")
	os.WriteFile(openKey, []byte(testAPIKey+"\n"), 0o600)
	os.Chmod(openKey, 0o644)
	openPIN := filepath.Join(dir, "open-pin")
	os.WriteFile(openPIN, []byte(tk.PIN+"\n"), 0o600)
	os.Chmod(openPIN, 0o604)
	out := filepath.Join(dir, "sig.der")

	base := []string{"--module", tk.Module, "--token-label", tk.Label, "--key-label", "rsa", "--pin-file", tk.PINFile, "--out", out}
	for _, tc := range []struct {
		name   string
		args   []string
		apiKey string
		code   int
		stderr string
	}{
		{"empty API key", []string{"--phone", "9161234567"}, " ", cmdutil.ExitBadInput, "invalid API key: the API key is empty"},
		{"empty API key file", []string{"--phone", "9161234567", "--api-key-file", emptyKey}, testAPIKey, cmdutil.ExitBadInput, "the API key: the file " + emptyKey + " (--api-key-file) is empty"},
		{"missing API key file", []string{"--phone", "9161234567", "--api-key-file", "/nonexistent"}, testAPIKey, cmdutil.ExitBadInput, "the API key: could not read /nonexistent"},
		{"API key file readable by all", []string{"--phone", "9161234567", "--api-key-file", openKey}, testAPIKey, cmdutil.ExitBadInput, "has mode 0644; run chmod o-rwx"},
		{"PIN file readable by all", []string{"--phone", "9161234567", "--pin-file", openPIN}, testAPIKey, cmdutil.ExitBadInput, "has mode 0604; run chmod o-rwx"},
		{"phone too short", []string{"--phone", "916123456"}, testAPIKey, cmdutil.ExitBadInput, "phone has 9 digits"},
		{"phone with letters", []string{"--phone", "916123456x"}, testAPIKey, cmdutil.ExitBadInput, "not a digit"},
		{"two kinds", []string{"--phone", "9161234567", "--snils", "11223344595"}, testAPIKey, cmdutil.ExitBadInput, "only one of"},
		{"no credential", nil, testAPIKey, cmdutil.ExitBadInput, "give one of --phone"},
		{"SNILS check number", []string{"--snils", "112-233-445 94"}, testAPIKey, cmdutil.ExitBadInput, "check number is wrong"},
		{"thumbprint 39", []string{"--thumbprint", strings.Repeat("a", 39)}, testAPIKey, cmdutil.ExitBadInput, "39 hex digits"},
		{"thumbprint 41", []string{"--thumbprint", strings.Repeat("a", 41)}, testAPIKey, cmdutil.ExitBadInput, "41 hex digits"},
		{"malformed timestamp", []string{"--phone", "9161234567", "--timestamp", "1.2.2024 3:04:05"}, testAPIKey, cmdutil.ExitBadInput, "invalid timestamp"},
		{"impossible date", []string{"--phone", "9161234567", "--timestamp", "31.02.2024 10:00:00"}, testAPIKey, cmdutil.ExitBadInput, "not a real date"},
		{"module missing", []string{"--phone", "9161234567", "--module", "/nonexistent/libp11.so"}, testAPIKey, cmdutil.ExitBadInput, "does not exist"},
		{"not a module", []string{"--phone", "9161234567", "--module", notModule}, testAPIKey, cmdutil.ExitFailure, "not a PKCS#11 module"},
		{"unknown token", []string{"--phone", "9161234567", "--token-label", "nope"}, testAPIKey, cmdutil.ExitBadInput, `token "nope" is not there`},
		{"wrong PIN", []string{"--phone", "9161234567", "--pin-file", wrongPIN}, testAPIKey, cmdutil.ExitFailure, "the token rejected the PIN"},
		{"key matches nothing", []string{"--phone", "9161234567", "--key-label", "nope"}, testAPIKey, cmdutil.ExitBadInput, `no private key labelled "nope"`},
		{"certificate of another key", []string{"--phone", "9161234567", "--certificate-file", otherCert}, testAPIKey, cmdutil.ExitBadInput, "is for another key"},
		{"output directory missing", []string{"--phone", "9161234567", "--out", filepath.Join(dir, "missing", "sig.der")}, testAPIKey, cmdutil.ExitBadInput, "does not exist"},
		{"bad format", []string{"--phone", "9161234567", "--format", "xml"}, testAPIKey, cmdutil.ExitBadInput, "--format"},
		{"bad hash", []string{"--phone", "9161234567", "--hash", "md5"}, testAPIKey, cmdutil.ExitBadInput, "hash"},
		{"unknown flag", []string{"--phone", "9161234567", "--pin", "1234"}, testAPIKey, cmdutil.ExitBadInput, "flag provided but not defined: -pin"},
		{"stray argument", []string{"--phone", "9161234567", "secret-value"}, testAPIKey, cmdutil.ExitBadInput, "no positional arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SIGNAGENT_API_KEY", tc.apiKey)
			var stdout, stderr bytes.Buffer
			args := append(append([]string{"signagent", "trusted", "sign"}, base...), tc.args...)
			code := run(args, strings.NewReader(""), &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "signagent: ") || !strings.Contains(last, tc.stderr) {
				t.Fatalf("stderr %q does not end in one line naming %q", stderr.String(), tc.stderr)
			}
			for _, secret := range []string{tk.PIN, "654321", testAPIKey, strings.ToLower(testAPIKey), "secret-value"} {
				if strings.Contains(stderr.String(), secret) {
					t.Fatalf("stderr holds a secret: %q", stderr.String())
				}
			}
			if stdout.Len() != 0 {
				t.Fatalf("stdout not empty: %q", stdout.String())
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 6 {
				t.Fatalf("files left behind in %s: %v", dir, entries)
			}
		})
	}
}
