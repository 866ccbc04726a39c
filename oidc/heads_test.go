package oidc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/internal/httpx/httpxtest"
)

// TestHostileHeadRefused: an identity provider's answer head of 100,000
// tiny fields or of 65 KiB is refused before it is held (httpx.Transport's
// bounds, 100 fields and 64 KiB), in one line naming the bound (before:
// up to 1 MiB in any number of fields).
func TestHostileHeadRefused(t *testing.T) {
	for name, answer := range httpxtest.Hostile() {
		url := httpxtest.Serve(t, func(string) string { return answer })
		c, err := New(Config{AuthURL: url, ClientID: testClient, ClientSecret: testSecret, Space: SpaceStaging})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Discover(context.Background())
		var he *httpx.HeadError
		if !errors.As(err, &he) || !httpxtest.Refused(err) || strings.Contains(err.Error(), testSecret) {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}
