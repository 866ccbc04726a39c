package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"

	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// builds are this test's binary and the same code built the other way:
// with the test-only tag signagent_format3 (it reads and writes a record
// format 3 that this release does not read) or without it. v2 reads up to
// format 2, v3 up to 3.
func builds(t *testing.T) (v2, v3 string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	read := store.BuildFormats().Read
	other := filepath.Join(t.TempDir(), "signagent-other")
	args := []string{"build", "-o", other}
	if read[len(read)-1] == 2 {
		args = append(args, "-tags", "signagent_format3")
	}
	cmd := exec.Command("go", append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if read[len(read)-1] == 2 {
		return self, other
	}
	return other, self
}

// binary is signagent at bin with env and args.
func binary(bin string, env []string, args ...string) *exec.Cmd {
	cmd := &exec.Cmd{Path: bin, Args: append([]string{"signagent"}, args...)}
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// fleet is the agents a load balancer sends calls to now.
type fleet struct {
	mu     sync.Mutex
	agents []*agentProc
}

func (f *fleet) pick() *agentProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.agents[rand.IntN(len(f.agents))]
}

func (f *fleet) set(agents []*agentProc) {
	f.mu.Lock()
	f.agents = agents
	f.mu.Unlock()
}

// rollingBed is a fleet of agents on one redis-server under load (trusted
// sessions, business calls through the proxy for trusted identities and
// for an OpenID Connect profile whose 4 s access tokens are refreshed
// with one-time refresh tokens), its agents replaced one at a time (a
// rolling upgrade or rollback: each new one ready before an old one
// stops), and what the emulator counted.
type rollingBed struct {
	t      *testing.T
	emu    *emulator.Server
	raw    *redis.Client
	fleet  fleet
	agents []*agentProc
	start  func(bin string) *agentProc

	calls, failed atomic.Int64
	failures      sync.Map
	stop          chan struct{}
	wg            sync.WaitGroup
}

const rollingIdentities, rollingSize = 6, 3

// newRollingBed signs the profile in with signIn's binary, starts
// rollingSize agents of first and the load.
func newRollingBed(t *testing.T, signInWith, first string) *rollingBed {
	b := &rollingBed{t: t, stop: make(chan struct{})}
	tk := procToken(t)
	// The cheapest bcrypt cost: the emulator checks the password at every
	// sign-in, and at the default cost that took seconds of CPU under -race.
	hashBytes, _ := bcrypt.GenerateFromPassword([]byte(browserPassword), bcrypt.MinCost)
	hash := string(hashBytes)
	users := []emulator.User{{ID: "alice", Login: "alice@example.com", PasswordHash: hash}}
	for i := range rollingIdentities {
		users = append(users, emulator.User{ID: fmt.Sprintf("u%d", i), Phone: fmt.Sprintf("93%08d", i), Linked: []string{fmt.Sprintf("p:crm-%d", i)}})
	}
	b.emu = startEmulator(t, &emulator.Config{
		Partners:   []emulator.Partner{{Name: "p", APIKey: testAPIKey, Certificates: []string{string(signertest.PEM(tk.RSA.Cert))}}},
		Developers: []emulator.Developer{{Name: "crm", Key: "testClient-0a1b2c3d4e"}},
		OIDC: emulator.OIDCConfig{Clients: []emulator.OIDCClient{{ID: "crm-app", Secret: "s3cret-of-the-app"}},
			DeviceInterval: emulator.Duration(time.Second), AccessTokenTTL: emulator.Duration(4 * time.Second), RefreshRotation: "one-time"},
		Users: users,
	})
	srv := storetest.Start(t)
	b.raw = redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { b.raw.Close() })
	dir := t.TempDir()
	key := filepath.Join(dir, "store.key")
	makeStoreKey(t, key)
	tokens := []*pkcs11test.Token{tk}
	// The previous release spells the identity provider's address, the
	// trusted service's and the business API's as they were before the
	// rename (--auth-url, --base-url, --api-url) and signs in with login.
	previous := func(bin string) bool { return filepath.Base(bin) == previousName }
	env := func(n int, bin string) []string {
		for len(tokens) <= n {
			tokens = append(tokens, tk.Twin(t))
		}
		oidcURL := "SIGNAGENT_OIDC_URL="
		if previous(bin) {
			oidcURL = "SIGNAGENT_AUTH_URL="
		}
		return append(serveEnv(tokens[n]), "SIGNAGENT_STORE="+srv.URL(), "SIGNAGENT_STORE_KEY_FILE="+key, "XDG_STATE_HOME="+dir,
			"SIGNAGENT_DEVELOPER_KEY=testClient-0a1b2c3d4e", oidcURL+b.emu.URL(), "SIGNAGENT_CLIENT_ID=crm-app",
			"SIGNAGENT_CLIENT_SECRET=s3cret-of-the-app", "SIGNAGENT_SPACE=staging")
	}
	login := []string{"oidc", "login", "--no-qr"}
	if previous(signInWith) {
		login = []string{"login", "--no-qr"}
	}
	signIn(t, binary(signInWith, append(env(0, signInWith), "SIGNAGENT_PROFILE=crm", "SIGNAGENT_LOG_LEVEL=warn"), login...), b.emu.URL())

	started := 0
	b.start = func(bin string) *agentProc {
		n := started
		started++
		sock := filepath.Join(dir, fmt.Sprintf("a%d.sock", n))
		trustedURL, businessURL := "--trusted-url", "--business-url"
		if previous(bin) {
			trustedURL, businessURL = "--base-url", "--api-url"
		}
		a := startServe(t, binary(bin, env(n%rollingSize, bin), "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull,
			trustedURL, b.emu.URL(), businessURL, b.emu.URL(), "--log-level", "warn"), sock)
		eventuallyReady(t, a)
		return a
	}
	for range rollingSize {
		b.agents = append(b.agents, b.start(first))
	}
	b.fleet.set(append([]*agentProc(nil), b.agents...)) // a copy: roll writes agents while callers read the fleet

	// The load: four callers until stop, each call to any agent of the
	// fleet, a partner's steady traffic (up to 50 calls a second each)
	// rather than a flood: the rolls are what is tested, and callers as
	// fast as they could go (2,500 calls a second) held both cores for
	// the test's minute, slowing every test beside it.
	for range 4 {
		b.wg.Go(func() {
			for {
				select {
				case <-b.stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				id := rand.IntN(rollingIdentities)
				a := b.fleet.pick()
				var code int
				var body string
				switch rand.IntN(3) {
				case 0:
					code, body = a.do("POST", "/v1/sessions", fmt.Sprintf(`{"phone":"93%08d","serviceUserId":"crm-%d"}`, id, id))
				case 1:
					code, body = a.doWith("GET", "/v1/service/GetMyOrganizations?autoRegister=false", "",
						map[string]string{"Signagent-Identity": fmt.Sprintf("trusted phone=93%08d serviceUserId=crm-%d", id, id)})
				default:
					code, body = a.doWith("GET", "/v1/service/GetMyOrganizations?autoRegister=false", "", map[string]string{"Signagent-Identity": "oidc profile=crm"})
				}
				b.calls.Add(1)
				if code != 200 {
					b.failed.Add(1)
					b.failures.Store(fmt.Sprintf("%d %s", code, body), true)
				}
			}
		})
	}
	return b
}

// roll replaces the fleet's agents one at a time by agents of bin: a new
// one ready, the old one out of the fleet, then stopped (SIGTERM: it
// finishes its calls in flight and withdraws its announcement).
func (b *rollingBed) roll(bin string) {
	for i := range b.agents {
		time.Sleep(time.Second) // calls to the mixed fleet
		next := b.start(bin)
		old := b.agents[i]
		b.agents[i] = next
		b.fleet.set(append([]*agentProc(nil), b.agents...))
		// As a pod's preStop: a caller that picked the old agent just
		// before has dialed it before it stops listening.
		time.Sleep(200 * time.Millisecond)
		old.cmd.Process.Signal(syscall.SIGTERM)
		<-old.done
	}
}

// formats are the formats of the records in Redis, counted.
func (b *rollingBed) formats() map[byte]int {
	out := map[byte]int{}
	for _, k := range b.raw.Keys(context.Background(), "signagent:{*}").Val() {
		if v, err := b.raw.HGet(context.Background(), k, "v").Bytes(); err == nil && len(v) > 0 {
			out[v[0]]++
		}
	}
	return out
}

// finish lets the last fleet serve a while (the records it was handed,
// refreshes included), stops the load and checks what a rolling upgrade
// and a rollback promise: no call failed, one trusted and one legacy
// login per identity, no device flow beyond the first sign-in, no refresh
// token used twice.
func (b *rollingBed) finish(what string) {
	t := b.t
	time.Sleep(5 * time.Second)
	close(b.stop)
	b.wg.Wait()
	st := b.emu.Stats()
	t.Logf("%s of %d agents: %d calls, %d failed; %d trusted logins for %d identities, %d legacy logins, %d OpenID Connect sign-ins (device flows) and %d refreshes, %d refresh tokens used twice",
		what, rollingSize, b.calls.Load(), b.failed.Load(), st.Sessions, rollingIdentities, st.LegacyTokens, st.AccessTokens-st.Refreshes, st.Refreshes, st.RefreshReuses)
	b.failures.Range(func(k, _ any) bool { t.Errorf("a failed call: %s", k); return true })
	if b.failed.Load() != 0 || st.Sessions != rollingIdentities || st.LegacyTokens != rollingIdentities || st.AccessTokens-st.Refreshes != 1 || st.RefreshReuses != 0 || st.Refreshes == 0 {
		t.Fatalf("want 0 failed calls, %d trusted and legacy logins, 1 sign-in, some refreshes and 0 reused", rollingIdentities)
	}
	for id, n := range st.SessionsByUser {
		if n != 1 {
			t.Errorf("%s: %d trusted logins", id, n)
		}
	}
}

// TestRollingFormatUpgrade: three agents of a build that reads up to
// format 2 (this release) are replaced one at a time by agents of the
// same code built to read and write a format 3, and then back (a
// rollback), under load (rollingBed). The new agents write format 2 while
// an old one is live and 3 once none is; after the rollback no record of
// format 3 is left.
func TestRollingFormatUpgrade(t *testing.T) {
	t.Parallel()
	v2, v3 := builds(t)
	b := newRollingBed(t, v2, v2)
	writes := func(a *agentProc) int {
		_, body := a.do("GET", "/readyz", "")
		var r struct{ StoreFormats struct{ Write int } }
		json.Unmarshal([]byte(body), &r)
		return r.StoreFormats.Write
	}
	time.Sleep(2 * time.Second)
	b.roll(v3)
	waitFor(t, 30*time.Second, "the new agents writing format 3", func() bool {
		for _, a := range b.agents {
			if writes(a) != 3 {
				return false
			}
		}
		return true
	})
	waitFor(t, 30*time.Second, "a record of format 3 (the profile refreshed)", func() bool { return b.formats()[3] > 0 })
	upgraded := b.formats()
	b.roll(v2)
	rolledBack := b.formats()
	b.finish(fmt.Sprintf("a rolling upgrade 2 -> 3 and a rollback 3 -> 2 (records by format after the upgrade %v, after the rollback %v)", upgraded, rolledBack))
	if rolledBack[3] != 0 {
		t.Errorf("records of format 3 left after the rollback: %v", rolledBack)
	}
}

// previousRelease is the release before this one, whose agents share a
// store with this one's during a rolling upgrade (docs/upgrading.md): the
// main of the round before.
const previousRelease = "a5cdd2a666c54fff65dd43f575e901c6919bf403"

// previousName is the file name of the previous release's binary.
const previousName = "signagent-previous"

// buildPrevious builds signagent at previousRelease from this checkout's
// history (git archive, go build): the test fails, not skips, without it.
func buildPrevious(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the previous release is built from this checkout's git history: git rev-parse: %v", err)
	}
	src := previousSource(t, strings.TrimSpace(string(root)))
	bin := filepath.Join(t.TempDir(), previousName)
	build := exec.Command("go", "build", "-o", bin, "./cmd/signagent")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of %s: %v\n%s", previousRelease[:7], err, out)
	}
	return bin
}

// previousSource is previousRelease's tree (git archive) in a directory
// named by the commit under the user's cache directory, made once: go
// build keys its cache by the source directory, so that a tree unpacked
// afresh for every run was compiled afresh every run (13 s of CPU, most of
// this test's). The commit names its content; a directory is renamed into
// place whole, so two runs at once each find it whole or make their own.
func previousSource(t *testing.T, repo string) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "signagent-test", "previous-"+previousRelease)
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
		return dir
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "unpacking-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", repo, previousRelease, tmp)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s (a clone without that commit cannot run this test): %v\n%s", previousRelease[:7], err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "go.mod")); statErr != nil {
			t.Fatalf("keep the previous release's tree: %v", err)
		}
	}
	return dir
}

// TestMixedReleases: agents of the previous release (previousRelease,
// built from history) and of this one share a store both ways: a fleet of
// the previous release, its profile signed in by it, is replaced one
// agent at a time by this release's, then rolled back, under load, with
// no call failed, one login per identity and nobody signed out
// (rollingBed). Nothing this release adds to the store (the formats'
// announcements, the store's probe lease, certificate logins' marks) is
// in the previous release's way.
func TestMixedReleases(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	previous := buildPrevious(t)
	b := newRollingBed(t, previous, previous)
	time.Sleep(2 * time.Second)
	b.roll(self)
	time.Sleep(5 * time.Second) // this release alone, on what the previous one wrote
	b.roll(previous)
	b.finish("a rolling upgrade from " + previousRelease[:7] + " to this build and a rollback")
	if f := b.formats(); len(f) != 1 || f[2] == 0 {
		t.Errorf("records by format after the rollback: %v (the previous release reads format 2)", f)
	}
}

// signIn runs login (the device flow) and approves it at the emulator's
// device page as alice.
func signIn(t *testing.T, login *exec.Cmd, emuURL string) {
	t.Helper()
	out, _ := login.StderrPipe()
	var stdout strings.Builder
	login.Stdout = &stdout
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	code := ""
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if m := regexp.MustCompile(`enter the code ([A-Z]{8})$`).FindStringSubmatch(sc.Text()); m != nil {
			code = m[1]
			break
		}
	}
	resp, err := http.PostForm(emuURL+"/device", url.Values{"user_code": {code}, "login": {"alice@example.com"},
		"password": {browserPassword}, "decision": {"allow"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for sc.Scan() {
	}
	if err := login.Wait(); err != nil {
		t.Fatalf("login: %v %s", err, stdout.String())
	}
}
