package legacycmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/legacy"
	"golang.org/x/crypto/bcrypt"
)

const devKey = "dev-key-of-the-family-test"

// TestLegacyFamily drives the legacy scheme's commands by password (no
// token) against the emulator's legacy side: legacy-token prints the
// token, header the ServiceAuth header of the same login, and a wrong
// password is refused with one line that holds no secret.
func TestLegacyFamily(t *testing.T) {
	clitest.Isolate(t)
	// The cheapest bcrypt cost: the emulator checks the password at every
	// sign-in, and at the default cost that took seconds of CPU under -race.
	hashBytes, err := bcrypt.GenerateFromPassword([]byte("s3cret-password"), bcrypt.MinCost)
	hash := string(hashBytes)
	if err != nil {
		t.Fatal(err)
	}
	emu := emulatortest.New(t, &emulator.Config{
		Developers: []emulator.Developer{{Key: devKey}},
		Users:      []emulator.User{{ID: "alice", Login: "alice@example.com", PasswordHash: hash}},
	})
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	wrong := filepath.Join(dir, "wrong")
	os.WriteFile(pw, []byte("s3cret-password\n"), 0o600)
	os.WriteFile(wrong, []byte("not-the-password\n"), 0o600)
	login := []string{"--by", "password", "--login", "alice@example.com", "--business-url", emu.URL()}

	t.Run("legacy-token", func(t *testing.T) {
		t.Setenv("SIGNAGENT_DEVELOPER_KEY", devKey)
		code, out, stderr := clitest.Run(t, "", append(append([]string{"legacy", "token"}, login...), "--password-file", pw)...)
		if code != 0 || strings.TrimSpace(out) == "" || strings.Contains(out+stderr, "s3cret-password") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
		}
	})
	t.Run("header", func(t *testing.T) {
		t.Setenv("SIGNAGENT_DEVELOPER_KEY", devKey)
		code, out, stderr := clitest.Run(t, "", append(append([]string{"header", "--scheme", "legacy"}, login...), "--password-file", pw)...)
		if code != 0 || !strings.HasPrefix(out, legacy.HeaderScheme+" ") || !strings.Contains(out, "ddauth_token=") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		t.Setenv("SIGNAGENT_DEVELOPER_KEY", devKey)
		code, out, stderr := clitest.Run(t, "", append(append([]string{"legacy", "token"}, login...), "--password-file", wrong)...)
		if code != cmdutil.ExitRefused || out != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || strings.Contains(stderr, "not-the-password") {
			t.Fatalf("exit %d (want %d), stdout %q, stderr %q", code, cmdutil.ExitRefused, out, stderr)
		}
	})
	t.Run("no developer key", func(t *testing.T) {
		t.Setenv("SIGNAGENT_DEVELOPER_KEY", "")
		code, _, stderr := clitest.Run(t, "", append(append([]string{"legacy", "token"}, login...), "--password-file", pw)...)
		if code != cmdutil.ExitBadInput || !strings.Contains(stderr, "developer key") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
}
