package doctorcmd_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
	"github.com/signagent/signagent/cmd/signagent/internal/doctorcmd"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
)

const devKey = "dev-key-of-the-doctor-test"

// TestDoctorFamily runs doctor over settings that need no token: nothing
// configured passes; a shared store without its key fails that check (the
// factory's store, opened from what doctor loaded); the developer key is
// asked of the emulator's legacy side, accepted, then refused.
func TestDoctorFamily(t *testing.T) {
	clitest.Isolate(t)
	emu := emulatortest.New(t, &emulator.Config{Developers: []emulator.Developer{{Key: devKey}}})
	doctor := func(t *testing.T, wantCode int, args ...string) map[string]doctorcmd.Check {
		t.Helper()
		code, out, stderr := clitest.Run(t, "", append([]string{"doctor", "--json"}, args...)...)
		var checks []doctorcmd.Check
		if err := json.Unmarshal([]byte(out), &checks); err != nil || code != wantCode {
			t.Fatalf("exit %d (want %d), stdout %q, stderr %q", code, wantCode, out, stderr)
		}
		byName := map[string]doctorcmd.Check{}
		for _, c := range checks {
			byName[c.Name] = c
		}
		if byName["settings"].Status != doctorcmd.OK {
			t.Fatalf("the settings check: %+v", checks)
		}
		return byName
	}
	t.Run("nothing configured", func(t *testing.T) {
		doctor(t, 0)
	})
	t.Run("store without key", func(t *testing.T) {
		c := doctor(t, cmdutil.ExitFailure, "--store", "redis://127.0.0.1:1")
		if c["store"].Status != doctorcmd.Fail || !strings.Contains(c["store"].Detail, "--store-key-file") {
			t.Fatalf("the store check: %+v", c["store"])
		}
	})
	t.Run("developer key", func(t *testing.T) {
		t.Setenv("SIGNAGENT_DEVELOPER_KEY", devKey)
		c := doctor(t, 0, "--business-url", emu.URL())
		if c["developer-key accepted"].Status != doctorcmd.OK {
			t.Fatalf("the developer key's check: %+v", c)
		}
		t.Setenv("SIGNAGENT_DEVELOPER_KEY", "not-"+devKey)
		c = doctor(t, cmdutil.ExitFailure, "--business-url", emu.URL())
		if c["developer-key accepted"].Status != doctorcmd.Fail || strings.Contains(c["developer-key accepted"].Detail, devKey) {
			t.Fatalf("a developer key the service refuses: %+v", c["developer-key accepted"])
		}
	})
}
