package emulator

import (
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// TestNewLeavesSharedConfigAlone: New fills its defaults and normalized
// values into copies, never into the lists the caller passed, which tests
// share between emulators they start side by side (a box's default
// domain written into a shared organization was a data race under -race).
func TestNewLeavesSharedConfigAlone(t *testing.T) {
	org := Organization{ID: "org-2", FullName: "Someone Else JSC", Boxes: []Box{{GUID: otherBox}}}
	user := User{ID: "bob", Thumbprints: []string{"aa bb cc dd ee ff 00 11 22 33 44 55 66 77 88 99 aa bb cc dd"}}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			cfg := &Config{Developers: []Developer{{Key: "testClient-0a1b2c3d4e"}}, Organizations: []Organization{org}, Users: []User{user}}
			if _, err := New(cfg, zerolog.Nop()); err != nil {
				t.Error(err)
				return
			}
			if b := cfg.Organizations[0].Boxes[0]; b.Domain == "" {
				t.Error("the emulator's own copy has no default domain")
			}
		})
	}
	wg.Wait()
	if org.Boxes[0].Domain != "" || user.Thumbprints[0] != "aa bb cc dd ee ff 00 11 22 33 44 55 66 77 88 99 aa bb cc dd" {
		t.Fatalf("New wrote into the caller's lists: box domain %q, thumbprint %q", org.Boxes[0].Domain, user.Thumbprints[0])
	}
}
