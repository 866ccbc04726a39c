package legacy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/internal/httpx/httpxtest"
	"github.com/signagent/signagent/legacy"
)

// TestHostileHeadRefused: an answer head of 100,000 tiny fields or of
// 65 KiB is refused before it is held (httpx.Transport's bounds, 100
// fields and 64 KiB), in one line naming the bound and not the developer
// key (before: up to 1 MiB in any number of fields).
func TestHostileHeadRefused(t *testing.T) {
	const key = "testClient-0a1b2c3d4e"
	for name, answer := range httpxtest.Hostile() {
		url := httpxtest.Serve(t, func(string) string { return answer })
		c, err := legacy.New(legacy.Config{APIURL: url, DeveloperKey: key, Settings: httpx.Settings{Timeout: 5 * time.Second, Attempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Password(context.Background(), "alice@example.com", "correct horse battery")
		var he *httpx.HeadError
		if !errors.As(err, &he) || !httpxtest.Refused(err) || strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "horse") {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
