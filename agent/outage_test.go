package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// outagePlan is how long each fault of runStoreOutage lasts.
type outagePlan struct {
	down, paused, refusing time.Duration
}

// outageFigures is what the callers and the probes saw during a run.
type outageFigures struct {
	mu sync.Mutex
	// answers counts by kind of call (oidc, legacy, trusted) and answer
	// ("200", "503 store_unavailable", ...).
	answers map[string]map[string]int
	// noRetryAfter counts 503s without Retry-After.
	noRetryAfter int
	// readyz counts /readyz answers by status and readiness.
	readyz                    map[string]int
	refreshes, reuses, logins int
}

func (f *outageFigures) count(kind, answer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.answers[kind] == nil {
		f.answers[kind] = map[string]int{}
	}
	f.answers[kind][answer]++
}

func (f *outageFigures) String() string {
	var b strings.Builder
	for _, kind := range []string{"oidc", "legacy", "trusted"} {
		keys := make([]string, 0, len(f.answers[kind]))
		total := 0
		for k, n := range f.answers[kind] {
			keys = append(keys, k)
			total += n
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "%s: %d calls:", kind, total)
		for _, k := range keys {
			fmt.Fprintf(&b, " %q %d", k, f.answers[kind][k])
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "readyz: %v\nrefreshes at the provider %d, refresh tokens used twice %d, trusted logins %d", f.readyz, f.refreshes, f.reuses, f.logins)
	return b.String()
}

// call sends one request to the agent on sock (identity: a proxied
// call's Signagent-Identity) and returns its status and body, or an
// error (never t.Fatal: callers are goroutines).
func call(c *http.Client, method, path, identity, body string) (int, http.Header, string, error) {
	req, _ := http.NewRequest(method, "http://agent"+path, strings.NewReader(body))
	if identity != "" {
		req.Header.Set(proxy.IdentityHeader, identity)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), nil
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// runStoreOutage runs two agents on one shared store (a real
// redis-server keeping what it acknowledged: appendonly, fsync always),
// with OpenID Connect (one-time refresh tokens, access tokens of 4 s:
// refreshes fall due during the faults), legacy and trusted identities,
// under a bounded load of calls through their API against the emulator,
// while the store is stopped and started again (plan.down), paused with
// SIGSTOP (plan.paused), and refusing writes (min-replicas-to-write 1 on
// a server without replicas: NOREPLICAS, plan.refusing). A probe asks
// each agent's /readyz throughout. It returns what was seen.
func runStoreOutage(t testing.TB, plan outagePlan) *outageFigures {
	h := start(t, options{oidc: true, legacy: true, apiURL: "emu", users: 8, idp: func(o *emulator.OIDCConfig) {
		o.RefreshRotation = "one-time"
		o.AccessTokenTTL = emulator.Duration(4 * time.Second)
	}})
	srv := storetest.Start(t, "appendonly yes", "appendfsync always")
	sealer, err := store.NewSealer([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	open := quickStore(t, srv, sealer)
	rec, err := h.store.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	first := open()
	if err := (&oidc.InStore{S: first, Name: srv.URL()}).Save(rec); err != nil {
		t.Fatal(err)
	}
	h.store.Remove("default") // only the shared store has it now
	b := h.second(t)
	agents := []*harness{h, b}
	for i, a := range agents {
		r := first
		if i > 0 {
			r = open()
		}
		a.reload(t, func(c *agent.Config) {
			c.SharedStore = r
			c.Schemes.OIDC = &schemes.OIDCSettings{Records: &oidc.InStore{S: r, Name: srv.URL()}, Client: func(*oidc.Record) (*oidc.Client, error) { return h.oidcClient(t), nil }}
			c.Schemes.Legacy = &schemes.LegacySettings{Client: &legacy.Config{APIURL: h.emu.URL(), DeveloperKey: devKey, Settings: httpx.Settings{Backoff: time.Millisecond}},
				Passwords: map[string]string{"alice@example.com": alicePassword}}
			c.Policy.ExposeLegacyHeader = true
			c.APIURL = h.emu.URL()
		})
	}
	f := &outageFigures{answers: map[string]map[string]int{}, readyz: map[string]int{}}
	before := h.emu.Stats()

	// The load: two callers per agent, each a bounded loop of calls
	// (OpenID Connect through the proxy, a legacy header, a trusted
	// session of one of eight users) until the plan is done.
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, a := range agents {
		for w := range 2 {
			wg.Go(func() {
				c := unixClient(a.sock)
				for n := 0; n < 1_000_000; n++ {
					select {
					case <-done:
						return
					default:
					}
					var kind string
					var code int
					var hdr http.Header
					var body string
					var err error
					// Every 20th call of a kind asks for a fresh one: a login,
					// by the agent itself while the store is down.
					refresh := (n/3)%20 == 19
					switch n % 3 {
					case 0:
						kind = "oidc"
						code, hdr, body, err = call(c, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "oidc", "")
					case 1:
						kind = "legacy"
						code, hdr, body, err = call(c, "POST", "/v1/authorizations", "", fmt.Sprintf(`{"scheme":"legacy","by":"password","login":"alice@example.com","refresh":%t}`, refresh))
					case 2:
						kind = "trusted"
						u := (n/3 + i + w) % 8
						code, hdr, body, err = call(c, "POST", "/v1/sessions", "", fmt.Sprintf(`{"phone":"92000000%02d","serviceUserId":"suid%d","refresh":%t}`, u, u, refresh))
					}
					answer := fmt.Sprint(code)
					switch {
					case err != nil:
						answer = "transport: " + err.Error()
					case code != 200:
						var e agentapi.ErrorBody
						json.Unmarshal([]byte(body), &e)
						answer += " " + e.Error.Code
						if e.Error.ServiceCode != "" {
							answer += " (" + e.Error.Step + ": " + e.Error.ServiceCode + ")"
						}
						if code == 503 && hdr.Get("Retry-After") == "" {
							f.mu.Lock()
							f.noRetryAfter++
							f.mu.Unlock()
						}
					}
					f.count(kind, answer)
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
	}
	// The readiness probe, on each agent, throughout.
	wg.Go(func() {
		cs := []*http.Client{unixClient(h.sock), unixClient(b.sock)}
		for n := 0; n < 1_000_000; n++ {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for _, c := range cs {
				code, _, body, err := call(c, "GET", "/readyz", "", "")
				var r agentapi.ReadyResponse
				json.Unmarshal([]byte(body), &r)
				f.mu.Lock()
				if err != nil {
					f.readyz["transport error"]++
				} else {
					f.readyz[fmt.Sprintf("%d %s", code, r.Status)]++
				}
				f.mu.Unlock()
			}
		}
	})

	probes := []*http.Client{unixClient(h.sock), unixClient(b.sock)}
	phase := time.Now()
	storeIs := func(up bool, why string) {
		for _, c := range probes {
			eventually(t, 15*time.Second, why, func() bool {
				_, _, body, _ := call(c, "GET", "/readyz", "", "")
				var r agentapi.ReadyResponse
				json.Unmarshal([]byte(body), &r)
				return r.Checks["store"].Ready == up
			})
		}
		t.Logf("%v: %s", time.Since(phase).Round(time.Millisecond), why)
		phase = time.Now()
	}
	storeIs(true, "the store up at the start")
	time.Sleep(time.Second) // the callers' caches filled

	srv.Stop()
	storeIs(false, "the store seen stopped")
	time.Sleep(plan.down)
	srv.Restart(t)
	storeIs(true, "the store seen started again")
	time.Sleep(time.Second)

	srv.Pause()
	storeIs(false, "the store seen paused")
	time.Sleep(plan.paused)
	srv.Resume()
	storeIs(true, "the store seen resumed")
	time.Sleep(time.Second)

	if got := storetest.Command(srv.Addr, "CONFIG", "SET", "min-replicas-to-write", "1"); got != "OK" {
		t.Fatalf("CONFIG SET min-replicas-to-write 1: %q", got)
	}
	storeIs(false, "the store seen refusing writes")
	time.Sleep(plan.refusing)
	storetest.Command(srv.Addr, "CONFIG", "SET", "min-replicas-to-write", "0")
	storeIs(true, "the store seen taking writes again")
	time.Sleep(time.Second)

	close(done)
	wg.Wait()
	after := h.emu.Stats()
	f.refreshes, f.reuses, f.logins = after.Refreshes-before.Refreshes, after.RefreshReuses-before.RefreshReuses, after.Sessions-before.Sessions
	return f
}

// TestStoreOutageUnderLoad: two agents on one real redis-server, under a
// bounded load of OpenID Connect, legacy and trusted calls (one in 20
// asking for a fresh legacy token or trusted session: a login), while the
// store is stopped and started (3 s), paused (2 s) and refusing writes
// (2 s): every legacy and trusted call is answered 200 (from memory, or
// logged in by the agent itself), an OpenID Connect call fails only with
// 503 store_unavailable and Retry-After (its access token due for a
// refresh that waits for the store's lease), no refresh token reaches the
// provider twice, refreshes happened, and every /readyz answer is 200
// (degraded while the store was down).
func TestStoreOutageUnderLoad(t *testing.T) {
	f := runStoreOutage(t, outagePlan{down: 3 * time.Second, paused: 2 * time.Second, refusing: 2 * time.Second})
	t.Logf("under load through the faults:\n%s", f)
	for _, kind := range []string{"legacy", "trusted"} {
		for answer, n := range f.answers[kind] {
			if answer != "200" {
				t.Errorf("%s: %d calls answered %q, want 200 only", kind, n, answer)
			}
		}
	}
	for answer, n := range f.answers["oidc"] {
		if answer != "200" && answer != "503 store_unavailable" {
			t.Errorf("oidc: %d calls answered %q, want 200 or 503 store_unavailable", n, answer)
		}
	}
	if f.noRetryAfter != 0 {
		t.Errorf("%d 503 answers without Retry-After", f.noRetryAfter)
	}
	if f.reuses != 0 {
		t.Errorf("the provider saw %d refresh tokens used twice", f.reuses)
	}
	if f.refreshes == 0 || f.answers["oidc"]["200"] == 0 || f.logins <= 8 {
		t.Errorf("no refresh or no OpenID Connect call answered: the run tested nothing: %s", f)
	}
	for answer, n := range f.readyz {
		if !strings.HasPrefix(answer, "200 ") {
			t.Errorf("/readyz answered %q %d times, want 200 (ready or degraded) throughout", answer, n)
		}
	}
	if f.readyz["200 degraded"] == 0 {
		t.Errorf("/readyz never said degraded: %v", f.readyz)
	}
}

// BenchmarkStoreOutage60s: the figure of runStoreOutage with the store
// stopped for 60 s (then paused and refusing writes for 5 s each), run
// once (go test ./agent -run '^$' -bench StoreOutage60s -benchtime 1x):
// the calls answered and refused by kind, the refresh tokens used twice
// and the readiness answers, as metrics and in the log.
func BenchmarkStoreOutage60s(b *testing.B) {
	for b.Loop() {
		f := runStoreOutage(b, outagePlan{down: 60 * time.Second, paused: 5 * time.Second, refusing: 5 * time.Second})
		b.Logf("under load, the store down 60 s:\n%s", f)
		for _, kind := range []string{"oidc", "legacy", "trusted"} {
			ok, failed := 0, 0
			for answer, n := range f.answers[kind] {
				if answer == "200" {
					ok += n
				} else {
					failed += n
				}
			}
			b.ReportMetric(float64(ok), kind+"-200")
			b.ReportMetric(float64(failed), kind+"-failed")
		}
		notReady := 0
		for answer, n := range f.readyz {
			if !strings.HasPrefix(answer, "200 ") {
				notReady += n
			}
		}
		b.ReportMetric(float64(f.reuses), "refresh-reuses")
		b.ReportMetric(float64(notReady), "readyz-not-200")
	}
}

// quickStore opens connections to srv's store, each closed with the test,
// with a store deadline of 500 ms (a store down delays a call that long).
func quickStore(t testing.TB, srv *storetest.Server, sealer *store.Sealer) func() *store.Shared {
	return func() *store.Shared {
		r, err := store.Open(srv.URL(), store.Options{Sealer: sealer, Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
}
