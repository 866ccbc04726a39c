package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/store/storetest"
)

// TestFiguresSharedStoreSessions: three `signagent serve` processes on one
// redis-server, asked for 1,000 trusted identities' sessions round-robin
// (each identity through every agent, eight callers at a time), make
// exactly 1,000 trusted authentications, that is 1,000 signatures on the
// token, not 3,000: the emulator counts the auth.sids it issued. Then a
// business call for each identity through every agent's proxy (the
// auth.sid exchanged for a legacy token, Authenticate type=sid) makes
// exactly 1,000 legacy logins, not 3,000. Under the race detector, 250
// identities: the agents it starts are race-built, and 1,000 took both
// cores for most of a minute beside the other tests.
func TestFiguresSharedStoreSessions(t *testing.T) {
	t.Parallel()
	identities, agents := 1000, 3
	if raceEnabled {
		identities = 250
	}
	tk, emu := trustedUsers(t, identities)
	srv := storetest.Start(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "store.key")
	makeStoreKey(t, key)
	var procs []*agentProc
	for i := range agents {
		sock := filepath.Join(dir, fmt.Sprintf("a%d.sock", i))
		env := append(serveEnv(tk), "SIGNAGENT_STORE="+srv.URL(), "SIGNAGENT_STORE_KEY_FILE="+key, "XDG_STATE_HOME="+dir,
			"SIGNAGENT_DEVELOPER_KEY=testClient-0a1b2c3d4e")
		procs = append(procs, startServe(t, signagent(t, env, "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull,
			"--trusted-url", emu.URL(), "--business-url", emu.URL(), "--log-level", "warn"), sock))
	}
	for _, a := range procs {
		eventuallyReady(t, a)
	}
	// everyone asks, through every agent, once per identity, eight callers
	// at a time; it says how long that took and counts the failures.
	var failed atomic.Int64
	everyone := func(ask func(id int, a *agentProc) (int, string)) time.Duration {
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					n := int(next.Add(1)) - 1
					if n >= identities*agents {
						return
					}
					id, a := n/agents, procs[n%agents]
					if code, body := ask(id, a); code != 200 {
						failed.Add(1)
						t.Errorf("identity %d through agent %d: %d %s", id, n%agents, code, body)
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	took := everyone(func(id int, a *agentProc) (int, string) {
		return a.do("POST", "/v1/sessions", fmt.Sprintf(`{"phone":"93%08d","serviceUserId":"crm-%d"}`, id, id))
	})
	st := emu.Stats()
	t.Logf("%d agents, %d identities, %d session requests in %v: the emulator issued %d auth.sids (%d step-1 requests, each one signature)",
		agents, identities, identities*agents, took.Round(time.Millisecond), st.Sessions, st.Requests["authenticate-by-truster"])
	if st.Sessions != identities || st.Requests["authenticate-by-truster"] != identities || failed.Load() != 0 {
		t.Fatalf("%d auth.sids and %d signatures for %d identities on %d agents, want %d each", st.Sessions, st.Requests["authenticate-by-truster"], identities, agents, identities)
	}

	// Legacy tokens: a business call per identity through every agent.
	took = everyone(func(id int, a *agentProc) (int, string) {
		return a.doWith("GET", "/v1/service/GetMyOrganizations?autoRegister=false", "",
			map[string]string{"Signagent-Identity": fmt.Sprintf("trusted phone=93%08d serviceUserId=crm-%d", id, id)})
	})
	st = emu.Stats()
	t.Logf("%d agents, %d identities, %d proxied calls in %v: %d legacy logins (Authenticate type=sid), %d auth.sids in all",
		agents, identities, identities*agents, took.Round(time.Millisecond), st.LegacyTokens, st.Sessions)
	if st.LegacyTokens != identities || st.Sessions != identities || failed.Load() != 0 {
		t.Fatalf("%d legacy logins and %d auth.sids for %d identities on %d agents, want %d each", st.LegacyTokens, st.Sessions, identities, agents, identities)
	}
}

// eventuallyReady waits until the agent's /readyz is 200.
func eventuallyReady(t *testing.T, a *agentProc) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		// Ready with every check, the shared store's too: a degraded
		// agent (200 as well) has not seen its store answer yet.
		if code, body := a.do("GET", "/readyz", ""); code == 200 && strings.Contains(body, `"status":"ready"`) {
			return
		}
		if time.Now().After(deadline) {
			code, body := a.do("GET", "/readyz", "")
			t.Fatalf("the agent is not ready: %d %s %s", code, body, a.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
