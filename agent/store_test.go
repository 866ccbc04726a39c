package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// TestAgentSharedStore: an agent whose OpenID Connect records are in a
// shared store (a real redis-server) serves the profile from it, reports
// the store in /readyz, keeps serving a valid access token from memory
// while the store is down (readyz says so), and refuses a refresh then
// with 503 store_unavailable rather than risk a spent refresh token.
func TestAgentSharedStore(t *testing.T) {
	h := start(t, options{oidc: true, apiURL: "emu"})
	srv := storetest.Start(t)
	sealer, _ := store.NewSealer(bytes.Repeat([]byte{3}, 32))
	r, err := store.Open(srv.URL(), store.Options{Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	shared := &oidc.InStore{S: r, Name: srv.URL()}
	rec, err := h.store.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	if err := shared.Save(rec); err != nil {
		t.Fatal(err)
	}
	h.store.Remove("default") // only the shared store has it now
	h.reload(t, func(c *agent.Config) {
		c.Schemes.OIDC = &schemes.OIDCSettings{Records: shared, Client: func(*oidc.Record) (*oidc.Client, error) { return h.oidcClient(t), nil }}
		c.SharedStore = r // one store for every scheme, as serve hands it over
	})

	if resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "oidc", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("through the shared store: %d %s", resp.StatusCode, body)
	}
	ready := func() (int, agentapi.ReadyResponse) {
		code, _, body := raw(t, h.sock, "GET", "/readyz", "")
		var r agentapi.ReadyResponse
		json.Unmarshal([]byte(body), &r)
		return code, r
	}
	eventually(t, 5*time.Second, "the store's probe", func() bool { _, r := ready(); return r.Checks["store"].Ready })
	if code, r := ready(); code != 200 || r.Status != "ready" || !r.Checks["store"].Ready || !r.Checks["store"].Dependency || !r.Checks["oidc"].Ready {
		t.Fatalf("readyz: %d %+v", code, r)
	}
	srv.Stop()
	if resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "oidc", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("a valid token while the store is down: %d %s", resp.StatusCode, body)
	}
	// The store down: degraded, still in service (200), the store named.
	eventually(t, 5*time.Second, "the store's probe to see it down", func() bool { _, r := ready(); return !r.Checks["store"].Ready })
	if code, r := ready(); code != 200 || r.Status != "degraded" || !strings.Contains(r.Checks["store"].Reason, "unavailable") || !r.Checks["oidc"].Ready {
		t.Fatalf("readyz with the store down: %d %+v", code, r)
	}
	if v := h.metric(t, "signagent_store_up"); v != "0" {
		t.Fatalf("signagent_store_up = %s with the store down", v)
	}
	if v := h.metric(t, `signagent_dependency_up{dependency="store"}`); v != "0" {
		t.Fatalf("signagent_dependency_up{store} = %s with the store down", v)
	}
	code, hdr, body := raw(t, h.sock, "POST", "/v1/authorizations", `{"scheme":"oidc","refresh":true}`)
	if code != 503 || !strings.Contains(body, `"store_unavailable"`) || hdr.Get("Retry-After") == "" {
		t.Fatalf("a refresh with the store down: %d %v %s", code, hdr, body)
	}
}

// TestAgentsShareSessions: two agents on one shared store (a real
// redis-server), asked for the sessions of ten users round-robin and
// concurrently, make one trusted authentication per user, not two: the
// emulator issues ten auth.sids for twenty requests. A session one agent
// drops is dropped for the other too. With the store down, the agent logs
// in itself (counted) rather than failing.
func TestAgentsShareSessions(t *testing.T) {
	h := start(t, options{users: 10})
	srv := storetest.Start(t)
	sealer, _ := store.NewSealer(bytes.Repeat([]byte{5}, 32))
	open := quickStore(t, srv, sealer)
	h.reload(t, func(c *agent.Config) { c.SharedStore = open() })
	b := h.second(t)
	b.reload(t, func(c *agent.Config) { c.SharedStore = open() })

	before := h.emu.Stats().Sessions
	var wg sync.WaitGroup
	sids := make([]string, 20)
	for i := range 20 {
		wg.Go(func() {
			a := h
			if i%2 == 1 {
				a = b
			}
			body := fmt.Sprintf(`{"phone":"92000000%02d","serviceUserId":"suid%d"}`, i/2, i/2)
			code, _, resp := raw(t, a.sock, "POST", "/v1/sessions", body)
			if code != 200 {
				t.Errorf("session %d: %d %s", i, code, resp)
				return
			}
			var s agentapi.SessionResponse
			json.Unmarshal([]byte(resp), &s)
			sids[i] = s.Sid
		})
	}
	wg.Wait()
	if n := h.emu.Stats().Sessions - before; n != 10 {
		t.Fatalf("%d trusted authentications for 10 users on two agents, want 10", n)
	}
	// Ten sessions were written to the store, by one agent or the other.
	puts := 0
	for _, a := range []*harness{h, b} {
		_, _, body := raw(t, a.sock, "GET", "/metrics", "")
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, `signagent_store_operations_total{op="put",result="ok"} `); ok {
				n, _ := strconv.Atoi(v)
				puts += n
			}
		}
	}
	if puts != 10 {
		t.Fatalf("%d sessions written to the store by the two agents, want 10", puts)
	}
	// Each agent says where its sessions came from: ten logins and ten
	// from the store between them, in the metrics and the audit lines.
	logins, fromStore := 0, 0
	for _, a := range []*harness{h, b} {
		_, _, body := raw(t, a.sock, "GET", "/metrics", "")
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, `signagent_sessions_total{source="login"} `); ok {
				n, _ := strconv.Atoi(v)
				logins += n
			}
			if v, ok := strings.CutPrefix(line, `signagent_sessions_total{source="store"} `); ok {
				n, _ := strconv.Atoi(v)
				fromStore += n
			}
		}
	}
	if logins != 10 || fromStore != 10 || !strings.Contains(h.audit.String(), `"from":"store"`) && !strings.Contains(h.audit.String(), `"from":"login"`) {
		t.Fatalf("sessions by source: %d logins, %d from the store (want 10 and 10)", logins, fromStore)
	}
	for i := 0; i < 20; i += 2 {
		if sids[i] == "" || sids[i] != sids[i+1] {
			t.Fatalf("user %d: the agents hold different sessions %q %q", i/2, sids[i], sids[i+1])
		}
	}
	// Dropped on one agent: the other, asked again, logs in anew.
	if code, _, body := raw(t, h.sock, "DELETE", "/v1/sessions?phone=9200000000&serviceUserId=suid0", ""); code != 200 {
		t.Fatalf("drop: %d %s", code, body)
	}
	before = h.emu.Stats().Sessions
	raw(t, h.sock, "POST", "/v1/sessions", `{"phone":"9200000000","serviceUserId":"suid0"}`) // a's memory is empty now
	if n := h.emu.Stats().Sessions - before; n != 1 {
		t.Fatalf("after a drop: %d logins, want 1", n)
	}
	// The store down: a new user is still served, logged in here.
	srv.Stop()
	before = h.emu.Stats().Sessions
	if code, _, body := raw(t, b.sock, "POST", "/v1/sessions", `{"phone":"9200000009","serviceUserId":"suid9","refresh":true}`); code != 200 {
		t.Fatalf("store down: %d %s", code, body)
	}
	if n := h.emu.Stats().Sessions - before; n != 1 {
		t.Fatalf("store down: %d logins, want 1", n)
	}
}

// TestAgentsShareLegacyTokens: two agents on one shared store make one
// legacy password login for one account between them, whichever is asked;
// "refresh": true on one (a token older than the floor) makes one new
// login that the other then uses.
func TestAgentsShareLegacyTokens(t *testing.T) {
	h := start(t, options{legacy: true, floor: 0})
	srv := storetest.Start(t)
	sealer, _ := store.NewSealer(bytes.Repeat([]byte{6}, 32))
	open := func() *store.Shared {
		r, err := store.Open(srv.URL(), store.Options{Sealer: sealer})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	b := h.second(t)
	withLegacy := func(c *agent.Config) {
		c.Schemes.Legacy = &schemes.LegacySettings{Client: &legacy.Config{APIURL: h.emu.URL(), DeveloperKey: devKey, Settings: httpx.Settings{Backoff: time.Millisecond}},
			Passwords: map[string]string{"alice@example.com": alicePassword}}
		c.Policy = agent.Policy{ExposeLegacyHeader: true}
		c.SharedStore = open()
	}
	b.reload(t, withLegacy)
	h.reload(t, func(c *agent.Config) { c.SharedStore = open() })

	before := h.emu.Stats().LegacyTokens
	headers := make([]string, 10)
	var wg sync.WaitGroup
	for i := range headers {
		wg.Go(func() {
			a := h
			if i%2 == 1 {
				a = b
			}
			code, _, body := raw(t, a.sock, "POST", "/v1/authorizations", `{"scheme":"legacy","by":"password","login":"alice@example.com"}`)
			if code != 200 {
				t.Errorf("%d: %d %s", i, code, body)
			}
			headers[i] = body[:strings.Index(body, `","expiresAt"`)]
		})
	}
	wg.Wait()
	if n := h.emu.Stats().LegacyTokens - before; n != 1 {
		t.Fatalf("%d legacy logins by two agents for one account, want 1", n)
	}
	for _, hd := range headers {
		if hd != headers[0] {
			t.Fatalf("different headers: %q", headers)
		}
	}
	// Where the headers came from: one login, the other agent's first from
	// the store, the rest from memory; in the metrics and the audit lines.
	count := func(source string) int {
		n := 0
		for _, a := range []*harness{h, b} {
			_, _, body := raw(t, a.sock, "GET", "/metrics", "")
			for _, line := range strings.Split(body, "\n") {
				if v, ok := strings.CutPrefix(line, `signagent_authorization_sources_total{scheme="legacy",source="`+source+`"} `); ok {
					k, _ := strconv.Atoi(v)
					n += k
				}
			}
		}
		return n
	}
	if l, st, m := count("login"), count("store"), count("memory"); l != 1 || st != 1 || m != 8 {
		t.Fatalf("legacy headers: %d from a login, %d from the store, %d from memory (want 1, 1, 8)", l, st, m)
	}
	if !strings.Contains(h.audit.String(), `"from":"store"`) || !strings.Contains(h.audit.String(), `"from":"login"`) {
		t.Fatalf("the audit lines do not say where headers came from:\n%s", h.audit.String())
	}
	code, _, body := raw(t, b.sock, "POST", "/v1/authorizations", `{"scheme":"legacy","by":"password","login":"alice@example.com","refresh":true}`)
	if code != 200 || strings.HasPrefix(body, headers[0]) {
		t.Fatalf("refresh: %d %s", code, body)
	}
	fresh := body[:strings.Index(body, `","expiresAt"`)]
	// A third agent started now finds the new token in the store: no login.
	c := h.second(t)
	c.reload(t, withLegacy)
	_, _, body = raw(t, c.sock, "POST", "/v1/authorizations", `{"scheme":"legacy","by":"password","login":"alice@example.com"}`)
	if !strings.HasPrefix(body, fresh) || h.emu.Stats().LegacyTokens-before != 2 {
		t.Fatalf("a third agent after the refresh: %s, %d logins (want 2)", body, h.emu.Stats().LegacyTokens-before)
	}
}

// shareOIDC starts a real redis-server as a shared store (sealed with a key
// of key's bytes), saves from's profile "default" in it, and reloads to
// onto it: every scheme's records there, as serve hands the store over.
func shareOIDC(t testing.TB, from, to *harness, key byte) (*storetest.Server, store.Records) {
	t.Helper()
	srv := storetest.Start(t)
	sealer, _ := store.NewSealer(bytes.Repeat([]byte{key}, 32))
	r, err := store.Open(srv.URL(), store.Options{Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	sh := &oidc.InStore{S: r, Name: srv.URL()}
	rec, err := from.store.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Save(rec); err != nil {
		t.Fatal(err)
	}
	to.reload(t, func(c *agent.Config) {
		c.Schemes.OIDC = &schemes.OIDCSettings{Records: sh, Client: func(*oidc.Record) (*oidc.Client, error) { return from.oidcClient(t), nil }}
		c.SharedStore = r
	})
	return srv, r
}

// BenchmarkCachedOIDCSharedStore: a signed-in profile's cached Bearer
// header from POST /v1/authorizations with the records in a shared store
// (a real redis-server) against the same with the local files, on two
// agents in the same run, alternating: the medians and their ratio
// (target: at most 1.1; a cached header costs no Redis round trip).
func BenchmarkCachedOIDCSharedStore(b *testing.B) {
	local := start(b, options{oidc: true})
	shared := local.second(b)
	shareOIDC(b, local, shared, 4)
	ctx := context.Background()
	req := agentapi.AuthorizationRequest{Scheme: "oidc"}
	for _, h := range []*harness{local, shared} {
		if _, err := h.client.Authorization(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	var fromLocal, fromShared []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if a, err := local.client.Authorization(ctx, req); err != nil || !a.Cached {
			b.Fatal(err)
		}
		t1 := time.Now()
		if a, err := shared.client.Authorization(ctx, req); err != nil || !a.Cached {
			b.Fatal(err)
		}
		fromLocal, fromShared = append(fromLocal, t1.Sub(t0)), append(fromShared, time.Since(t1))
	}
	ml, ms := median(fromLocal), median(fromShared)
	b.ReportMetric(float64(ml.Microseconds()), "local-median-µs")
	b.ReportMetric(float64(ms.Microseconds()), "shared-median-µs")
	b.ReportMetric(float64(ms)/float64(ml), "shared/local")
}

// TestAgentSharedStoreTampered: a record in the shared store that does not
// open with the key (here: overwritten by someone with write access to
// Redis) is never used: the profile must sign in again (409), each such
// value is counted, and the agent says so once in its log, without the
// value.
func TestAgentSharedStoreTampered(t *testing.T) {
	h := start(t, options{oidc: true})
	srv := storetest.Start(t)
	sealer, _ := store.NewSealer(bytes.Repeat([]byte{8}, 32))
	r, err := store.Open(srv.URL(), store.Options{Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec, _ := h.store.Load("default")
	sh := &oidc.InStore{S: r, Name: srv.URL()}
	if err := sh.Save(rec); err != nil {
		t.Fatal(err)
	}
	h.reload(t, func(c *agent.Config) {
		c.Schemes.OIDC = &schemes.OIDCSettings{Records: sh, Client: func(*oidc.Record) (*oidc.Client, error) { return h.oidcClient(t), nil }}
		c.SharedStore = r
	})
	if got := storetest.Command(srv.Addr, "HSET", "signagent:{"+sealer.Name("oidc", "default")+"}", "v", "forged-by-someone"); got != "0" {
		t.Fatalf("HSET: %q", got)
	}
	for range 2 {
		code, _, body := raw(t, h.sock, "POST", "/v1/authorizations", `{"scheme":"oidc"}`)
		if code != 409 || !strings.Contains(body, "does not open with the store key") || strings.Contains(body, "forged") {
			t.Fatalf("a forged record: %d %s", code, body)
		}
	}
	if n := strings.Count(h.logs.String(), "did not open with the store key"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, h.logs.String())
	}
	if v := h.metric(t, `signagent_store_operations_total{op="get",result="sealed"}`); v != "2" {
		t.Fatalf("sealed values counted: %s, want 2", v)
	}
}

// sealerOf is a store sealer under a key of 32 bytes b.
func sealerOf(t *testing.T, b byte) *store.Sealer {
	t.Helper()
	s, err := store.NewSealer(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sharedOIDC puts the harness's signed-in profile in a shared store (a
// real redis-server) and has the agent use it; it returns the store's raw
// client and the record's key in Redis.
func sharedOIDC(t *testing.T, h *harness, sealer *store.Sealer) (*redis.Client, string) {
	t.Helper()
	srv := storetest.Start(t)
	r, err := store.Open(srv.URL(), store.Options{Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	rec, err := h.store.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	sh := &oidc.InStore{S: r, Name: srv.URL()}
	if err := sh.Save(rec); err != nil {
		t.Fatal(err)
	}
	h.reload(t, func(c *agent.Config) {
		c.Schemes.OIDC = &schemes.OIDCSettings{Records: sh, Client: func(*oidc.Record) (*oidc.Client, error) { return h.oidcClient(t), nil }}
		c.SharedStore = r
	})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb, "signagent:{" + sealer.Name("oidc", "default") + "}"
}

// TestAgentSharedStoreTooLarge: a record made huge in the shared store by
// someone with write access to Redis (32 MiB) is refused by Redis before
// it is sent: the profile must sign in again (409), the agent allocates a
// few KiB, not the value's 32 MiB, each refusal is counted, and the value
// is left in Redis as it was.
func TestAgentSharedStoreTooLarge(t *testing.T) {
	h := start(t, options{oidc: true})
	ctx := context.Background()
	rdb, k := sharedOIDC(t, h, sealerOf(t, 9))
	huge := make([]byte, 32<<20)
	huge[0] = 2
	if err := rdb.HSet(ctx, k, "v", huge).Err(); err != nil {
		t.Fatal(err)
	}
	huge = nil
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 2 {
		code, _, body := raw(t, h.sock, "POST", "/v1/authorizations", `{"scheme":"oidc"}`)
		if code != 409 || !strings.Contains(body, "over the store's size bound: 33554432 bytes, more than 65536") || strings.Contains(body, "store key") {
			t.Fatalf("a huge record: %d %s", code, body)
		}
	}
	runtime.ReadMemStats(&after)
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("two requests over a 32 MiB record: %d KiB allocated", grew>>10)
	if grew > 8<<20 {
		t.Fatalf("two requests over a 32 MiB record allocated %d MiB: the value was read", grew>>20)
	}
	if v := h.metric(t, `signagent_store_operations_total{op="get",result="too_large"}`); v != "2" {
		t.Fatalf("too large values counted: %s, want 2", v)
	}
	if n, _ := rdb.HStrLen(ctx, k, "v").Result(); n != 32<<20 {
		t.Fatalf("the refusals changed the record in Redis: %d bytes", n)
	}
	if code, _, body := raw(t, h.sock, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz after the refusals: %d %s", code, body)
	}
	if n := strings.Count(h.logs.String(), "over the store's size bound; it was not read"); n != 1 {
		t.Fatalf("the log says %d times that a value was over the bound, want once:\n%s", n, h.logs.String())
	}
}

// TestAgentSharedStoreRollback: a profile's older record put back in the
// shared store after this agent wrote a newer one is refused: the agent
// does not refresh with it (its one-time refresh token may be spent, and
// a provider that sees it again revokes the whole grant), the profile must
// sign in again (409), the refusal is counted, and the record is left as
// it is. The newer record, put back, is used again.
func TestAgentSharedStoreRollback(t *testing.T) {
	h := start(t, options{oidc: true})
	ctx := context.Background()
	rdb, k := sharedOIDC(t, h, sealerOf(t, 10))
	older, _ := rdb.HGet(ctx, k, "v").Result()
	refreshes := h.emu.Stats().Refreshes
	if code, _, body := raw(t, h.sock, "POST", "/v1/authorizations", `{"scheme":"oidc","refresh":true}`); code != 200 || h.emu.Stats().Refreshes != refreshes+1 {
		t.Fatalf("refresh: %d %s", code, body)
	}
	newer, _ := rdb.HGet(ctx, k, "v").Result()
	if newer == older {
		t.Fatal("the refreshed record was not written")
	}
	rdb.HSet(ctx, k, "v", older)
	code, _, body := raw(t, h.sock, "POST", "/v1/authorizations", `{"scheme":"oidc","refresh":true}`)
	if code != 409 || !strings.Contains(body, "older record put back") {
		t.Fatalf("a rolled-back record: %d %s", code, body)
	}
	if n := h.emu.Stats().Refreshes; n != refreshes+1 {
		t.Fatalf("the agent refreshed with the rolled-back record (%d refreshes, want %d)", n, refreshes+1)
	}
	// Each read of it is refused and counted (the request reads it more
	// than once).
	if v, _ := strconv.Atoi(h.metric(t, `signagent_store_operations_total{op="get",result="rollback"}`)); v < 1 {
		t.Fatalf("rollbacks counted: %d", v)
	}
	if v, _ := rdb.HGet(ctx, k, "v").Result(); v != older {
		t.Fatal("the refusal changed the record in Redis")
	}
	if n := strings.Count(h.logs.String(), "older than one this agent has seen"); n != 1 {
		t.Fatalf("the log says %d times that a record was rolled back, want once:\n%s", n, h.logs.String())
	}
	rdb.HSet(ctx, k, "v", newer)
	if code, _, body := raw(t, h.sock, "POST", "/v1/authorizations", `{"scheme":"oidc"}`); code != 200 {
		t.Fatalf("the newer record put back: %d %s", code, body)
	}
}

// TestReadyzStoreReason: /readyz names why the store's probe failed, in
// its one line: a store refusing writes (NOREPLICAS), then one stopped
// (connection refused); never its password.
func TestReadyzStoreReason(t *testing.T) {
	h := start(t, options{})
	const password = "s3cret-store-password"
	srv := storetest.Start(t, "requirepass "+password)
	sealer, _ := store.NewSealer(bytes.Repeat([]byte{3}, 32))
	r, err := store.Open(srv.URL(), store.Options{Sealer: sealer, Password: password, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h.reload(t, func(c *agent.Config) { c.SharedStore = r })
	reason := func() string {
		_, _, body := raw(t, h.sock, "GET", "/readyz", "")
		var r agentapi.ReadyResponse
		json.Unmarshal([]byte(body), &r)
		if c, ok := r.Checks["store"]; ok && !c.Ready {
			return c.Reason
		}
		return ""
	}
	eventually(t, 5*time.Second, "the store's probe", func() bool {
		_, _, body := raw(t, h.sock, "GET", "/readyz", "")
		return strings.Contains(body, `"status":"ready"`)
	})
	if got := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: password}).ConfigSet(context.Background(), "min-replicas-to-write", "1").Val(); got != "OK" {
		t.Fatalf("CONFIG SET min-replicas-to-write 1: %q", got)
	}
	eventually(t, 5*time.Second, "the store seen refusing writes", func() bool { return reason() != "" })
	if got := reason(); !strings.Contains(got, "NOREPLICAS") || strings.Contains(got, password) {
		t.Errorf("store refusing writes: reason %q, want NOREPLICAS named", got)
	}
	srv.Stop()
	eventually(t, 5*time.Second, "the store seen stopped", func() bool { return strings.Contains(reason(), "refused") })
	if got := reason(); strings.Contains(got, password) || strings.Contains(got, "\n") {
		t.Errorf("store stopped: reason %q", got)
	}
}

// TestReloadKeepsStoreState: a reload that reopens the shared store (as
// SIGHUP does) keeps the last probe's result in /readyz and
// signagent_store_up until the new store's first probe says otherwise
// (here the store is paused: that probe fails): never "not checked yet".
func TestReloadKeepsStoreState(t *testing.T) {
	h := start(t, options{})
	srv := storetest.Start(t)
	sealer, _ := store.NewSealer(bytes.Repeat([]byte{3}, 32))
	// The first store leaves quickly once paused (its Close, in the
	// reload); the second's probe waits its whole bound (a second).
	open := func(timeout time.Duration) *store.Shared {
		r, err := store.Open(srv.URL(), store.Options{Sealer: sealer, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	h.reload(t, func(c *agent.Config) { c.SharedStore = open(100 * time.Millisecond) })
	check := func() agentapi.Check {
		_, _, body := raw(t, h.sock, "GET", "/readyz", "")
		var r agentapi.ReadyResponse
		json.Unmarshal([]byte(body), &r)
		return r.Checks["store"]
	}
	eventually(t, 5*time.Second, "the store's probe", func() bool { return check().Ready })
	srv.Pause()
	h.reload(t, func(c *agent.Config) { c.SharedStore = open(time.Minute) })
	defer srv.Resume() // before the stores close
	for seen := 0; ; seen++ {
		c := check()
		if strings.Contains(c.Reason, "not checked") {
			t.Fatalf("after %d answers, /readyz after a reload: %+v", seen, c)
		}
		if v := h.metric(t, "signagent_store_up"); v == "" {
			t.Fatalf("after %d answers, no signagent_store_up after a reload", seen)
		}
		if !c.Ready {
			break // the new store's probe: the store is paused
		}
	}
}
