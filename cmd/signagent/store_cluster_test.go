package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
	"github.com/signagent/signagent/store/storetest"
)

// TestServeSharedStoreCluster: two `signagent serve` processes on a
// three-master Redis Cluster (--store redis+cluster://...) share what they
// log in: six identities, each asked of both agents at once, make six
// trusted authentications (six signatures), not twelve, and both agents
// hand out the same auth.sid; a business call for each through both
// proxies makes six legacy logins. Nothing in the cluster reads in clear.
func TestServeSharedStoreCluster(t *testing.T) {
	t.Parallel()
	const identities = 6
	tk, emu := trustedUsers(t, identities)
	cluster := storetest.StartCluster(t, 3)
	dir := t.TempDir()
	key := filepath.Join(dir, "store.key")
	makeStoreKey(t, key)
	// Each agent its own token with the same key, as two hosts would have
	// (TestTwoAgentsOnOneToken is about sharing one): twelve signatures
	// asked of one SoftHSM token by two processes at once were once
	// answered CKR_GENERAL_ERROR while the other process wrote its files.
	tokens := [2]*pkcs11test.Token{tk, tk.Twin(t)}
	var agents [2]*agentProc
	for i := range agents {
		sock := filepath.Join(dir, fmt.Sprintf("a%d.sock", i))
		env := append(serveEnv(tokens[i]), "SIGNAGENT_STORE="+cluster.URL(), "SIGNAGENT_STORE_KEY_FILE="+key, "XDG_STATE_HOME="+dir,
			"SIGNAGENT_DEVELOPER_KEY=testClient-0a1b2c3d4e")
		agents[i] = startServe(t, signagent(t, env, "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull,
			"--trusted-url", emu.URL(), "--business-url", emu.URL(), "--log-level", "warn"), sock)
	}
	for _, a := range agents {
		eventuallyReady(t, a)
		if code, body := a.do("GET", "/readyz", ""); code != 200 || !strings.Contains(body, `"store":{"ready":true`) {
			t.Fatalf("readyz: %d %s", code, body)
		}
	}
	// every asks each identity of both agents at once and returns the
	// answers' bodies, by identity and agent.
	every := func(ask func(id int, a *agentProc) (int, string)) [identities][2]string {
		var out [identities][2]string
		var wg sync.WaitGroup
		for id := range identities {
			for n, a := range agents {
				wg.Go(func() {
					code, body := ask(id, a)
					if code != 200 {
						t.Errorf("identity %d through agent %d: %d %s", id, n, code, body)
					}
					out[id][n] = body
				})
			}
		}
		wg.Wait()
		return out
	}
	sessions := every(func(id int, a *agentProc) (int, string) {
		return a.do("POST", "/v1/sessions", fmt.Sprintf(`{"phone":"93%08d","serviceUserId":"crm-%d"}`, id, id))
	})
	for id, got := range sessions {
		var a, b struct{ Sid string }
		json.Unmarshal([]byte(got[0]), &a)
		json.Unmarshal([]byte(got[1]), &b)
		if a.Sid == "" || a.Sid != b.Sid {
			t.Errorf("identity %d: two sessions %s and %s", id, got[0], got[1])
		}
	}
	st := emu.Stats()
	if st.Sessions != identities || st.Requests["authenticate-by-truster"] != identities {
		t.Fatalf("%d auth.sids and %d signatures for %d identities on 2 agents, want %d each", st.Sessions, st.Requests["authenticate-by-truster"], identities, identities)
	}
	every(func(id int, a *agentProc) (int, string) {
		return a.doWith("GET", "/v1/service/GetMyOrganizations?autoRegister=false", "",
			map[string]string{"Signagent-Identity": fmt.Sprintf("trusted phone=93%08d serviceUserId=crm-%d", id, id)})
	})
	if st = emu.Stats(); st.LegacyTokens != identities || st.Sessions != identities {
		t.Fatalf("%d legacy logins and %d auth.sids for %d identities on 2 agents, want %d each", st.LegacyTokens, st.Sessions, identities, identities)
	}
	var dump strings.Builder
	for _, m := range cluster.Masters {
		dump.WriteString(storetest.Dump(t, m.Addr))
	}
	if !strings.Contains(dump.String(), "signagent:{") {
		t.Fatalf("no record in the cluster:\n%s", dump.String())
	}
	for id := range identities {
		for _, s := range []string{fmt.Sprintf("93%08d", id), fmt.Sprintf("crm-%d", id)} {
			if strings.Contains(dump.String(), s) {
				t.Fatalf("%q is in the cluster in clear", s)
			}
		}
	}
}

// trustedUsers is a token and an emulator whose partner "p" (that token's
// certificate) has n users linked, u<i> with phone 93<i, 8 digits> as
// crm-<i>, and a developer key testClient-0a1b2c3d4e for the legacy side.
func trustedUsers(t *testing.T, n int) (*pkcs11test.Token, *emulator.Server) {
	tk := procToken(t)
	users := make([]emulator.User, n)
	for i := range users {
		users[i] = emulator.User{ID: fmt.Sprintf("u%d", i), Phone: fmt.Sprintf("93%08d", i), Linked: []string{fmt.Sprintf("p:crm-%d", i)}}
	}
	return tk, startEmulator(t, &emulator.Config{
		Partners:   []emulator.Partner{{Name: "p", APIKey: testAPIKey, Certificates: []string{string(signertest.PEM(tk.RSA.Cert))}}},
		Developers: []emulator.Developer{{Name: "crm", Key: "testClient-0a1b2c3d4e"}},
		Users:      users,
	})
}
