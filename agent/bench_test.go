package agent_test

import (
	"context"
	"testing"

	"github.com/signagent/signagent/api"
)

// BenchmarkAgent serves the agent on a real Unix socket in this process and
// calls it through agentclient: one signature at a time, a cached session,
// and /readyz (the floor of any request over the socket). `signagent bench`
// measures the daemon as a separate process.
func BenchmarkAgent(b *testing.B) {
	h := start(b, options{})
	ctx := context.Background()
	req := api.SessionRequest{Credential: phone, ServiceUserID: "crm-42"}
	if _, err := h.client.Session(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.Run("readyz", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.client.Ready(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("session-cached", func(b *testing.B) {
		for b.Loop() {
			if s, err := h.client.Session(ctx, req); err != nil || !s.Cached {
				b.Fatal(err)
			}
		}
	})
	b.Run("signature", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.client.Sign(ctx, api.SignatureRequest{Credential: phone}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
