package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/hsmtest"
	"github.com/signagent/signagent/internal/redistest"
)

// TestFiguresSharedStoreSessions: three `signagent serve` processes on one
// redis-server, asked for 1,000 trusted identities' sessions round-robin
// (each identity through every agent, eight callers at a time), make
// exactly 1,000 trusted authentications, that is 1,000 signatures on the
// token, not 3,000: the emulator counts the auth.sids it issued.
func TestFiguresSharedStoreSessions(t *testing.T) {
	const identities, agents = 1000, 3
	tk := hsmtest.New(t)
	users := make([]emulator.User, identities)
	for i := range users {
		users[i] = emulator.User{ID: fmt.Sprintf("u%d", i), Phone: fmt.Sprintf("93%08d", i), Linked: []string{fmt.Sprintf("p:crm-%d", i)}}
	}
	emu, err := emulator.New(&emulator.Config{
		Partners: []emulator.Partner{{Name: "p", APIKey: testAPIKey, Certificates: []string{string(hsmtest.PEM(tk.RSA.Cert))}}},
		Users:    users,
	}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.Start(); err != nil {
		t.Fatal(err)
	}
	defer emu.Close(context.Background())
	srv := redistest.Start(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "store.key")
	if code, stderr, _ := runBinary(t, signagent(t, nil, "store-key", "--out", key)); code != 0 {
		t.Fatal(stderr)
	}
	var procs []*agentProc
	for i := range agents {
		sock := filepath.Join(dir, fmt.Sprintf("a%d.sock", i))
		env := append(serveEnv(tk), "SIGNAGENT_STORE="+srv.URL(), "SIGNAGENT_STORE_KEY_FILE="+key, "XDG_STATE_HOME="+dir)
		procs = append(procs, startServe(t, signagent(t, env, "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull,
			"--base-url", emu.URL(), "--log-level", "warn"), sock))
	}
	for _, a := range procs {
		eventuallyReady(t, a)
	}
	start := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				n := int(next.Add(1)) - 1
				if n >= identities*agents {
					return
				}
				id, a := n/agents, procs[n%agents]
				code, body := a.do("POST", "/v1/sessions", fmt.Sprintf(`{"phone":"93%08d","serviceUserId":"crm-%d"}`, id, id))
				if code != 200 {
					failed.Add(1)
					t.Errorf("identity %d through agent %d: %d %s", id, n%agents, code, body)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	st := emu.Stats()
	t.Logf("%d agents, %d identities, %d session requests in %v: the emulator issued %d auth.sids (%d step-1 requests, each one signature)",
		agents, identities, identities*agents, took.Round(time.Millisecond), st.Sessions, st.Requests["authenticate-by-truster"])
	if st.Sessions != identities || st.Requests["authenticate-by-truster"] != identities || failed.Load() != 0 {
		t.Fatalf("%d auth.sids and %d signatures for %d identities on %d agents, want %d each", st.Sessions, st.Requests["authenticate-by-truster"], identities, agents, identities)
	}
}

// eventuallyReady waits until the agent's /readyz is 200.
func eventuallyReady(t *testing.T, a *agentProc) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if code, _ := a.do("GET", "/readyz", ""); code == 200 {
			return
		}
		if time.Now().After(deadline) {
			code, body := a.do("GET", "/readyz", "")
			t.Fatalf("the agent is not ready: %d %s %s", code, body, a.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
