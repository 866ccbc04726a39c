package agent_test

import (
	"context"
	"testing"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
)

// BenchmarkDaemonSignatures drives a whole daemon (agent.Start: audit file,
// metrics, Unix socket) from 8 callers in this process, for profiles of
// the server side (-cpuprofile). The process-level figure is
// BenchmarkAgentCPUPerSignature in cmd/signagent.
func BenchmarkDaemonSignatures(b *testing.B) {
	cfg, _ := daemonConfig(b)
	cfg.TokenConcurrency = 8
	d, err := agent.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	c := agentclient.NewUnix(cfg.Listen[0][len("unix:"):])
	b.SetParallelism(4) // 8 callers on 2 CPUs
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Sign(context.Background(), agentapi.SignatureRequest{Credential: agentapi.Credential{Phone: "9161234567"}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
