package trusted_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/internal/httpx/httpxtest"
	"github.com/signagent/signagent/trusted"
)

// TestHostileHeadRefused: an answer head of 100,000 tiny fields or of
// 65 KiB is refused before it is held (httpx.Transport's bounds, 100
// fields and 64 KiB), in one line naming the bound (before: up to 1 MiB
// in any number of fields).
func TestHostileHeadRefused(t *testing.T) {
	for name, answer := range httpxtest.Hostile() {
		url := httpxtest.Serve(t, func(string) string { return answer })
		c, err := trusted.New(trusted.Config{BaseURL: url, APIKey: apiKey, Settings: httpx.Settings{Timeout: 5 * time.Second, Attempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Link(context.Background(), serviceUser, canonical.Credential{Kind: canonical.Phone, Value: userPhone})
		var he *httpx.HeadError
		if !errors.As(err, &he) || !httpxtest.Refused(err) || !strings.HasSuffix(err.Error(), ", more than signagent reads") {
			t.Fatalf("%s: %v", name, err)
		}
		assertNoSecrets(t, err.Error())
	}
}
