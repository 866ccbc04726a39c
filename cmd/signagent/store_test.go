package main

import (
	"bytes"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/store/storetest"
	"golang.org/x/crypto/bcrypt"
)

// TestSharedStoreAcrossProcesses: an operator signs a profile in once
// (signagent oidc login --store redis://...), and separate processes, each with
// its own state directory as on separate machines, use it: when its
// one-time refresh token must be used, two at once make exactly one
// refresh, print the same token, and the provider sees no spent refresh
// token again. Redis holds no profile name or token in clear.
func TestSharedStoreAcrossProcesses(t *testing.T) {
	t.Parallel()
	// The cheapest bcrypt cost: the emulator checks the password at every
	// sign-in, and at the default cost that took seconds of CPU under -race.
	hashBytes, _ := bcrypt.GenerateFromPassword([]byte(browserPassword), bcrypt.MinCost)
	hash := string(hashBytes)
	emu := startEmulator(t, &emulator.Config{
		OIDC: emulator.OIDCConfig{Clients: []emulator.OIDCClient{{ID: "crm-app", Secret: "s3cret-of-the-app"}},
			DeviceInterval: emulator.Duration(time.Second), AccessTokenTTL: emulator.Duration(4 * time.Second), RefreshRotation: "one-time"},
		Users: []emulator.User{{ID: "alice", Login: "alice@example.com", PasswordHash: hash}},
	})
	srv := storetest.Start(t)
	key := filepath.Join(t.TempDir(), "store.key")
	makeStoreKey(t, key)
	env := func() []string {
		return []string{"XDG_STATE_HOME=" + t.TempDir(), "SIGNAGENT_OIDC_URL=" + emu.URL(), "SIGNAGENT_CLIENT_ID=crm-app",
			"SIGNAGENT_CLIENT_SECRET=s3cret-of-the-app", "SIGNAGENT_SPACE=staging", "SIGNAGENT_STORE=" + srv.URL(),
			"SIGNAGENT_STORE_KEY_FILE=" + key, "SIGNAGENT_PROFILE=crm", "SIGNAGENT_LOG_LEVEL=warn"}
	}

	// Sign in once, through the device flow, into the shared store.
	signIn(t, signagent(t, env(), "oidc", "login", "--no-qr"), emu.URL())

	// Another machine: status from the store.
	var status bytes.Buffer
	st := signagent(t, env(), "oidc", "status")
	st.Stdout = &status
	if code, stderr, _ := runBinary(t, st); code != 0 || !strings.Contains(status.String(), "alice") {
		t.Fatalf("status: %d %q %s", code, status.String(), stderr)
	}

	// Wait until the 4 s token needs a refresh (an eighth of its life
	// left), then three processes ask for it at once.
	time.Sleep(3700 * time.Millisecond)
	before := emu.Stats()
	var wg sync.WaitGroup
	tokens := make([]string, 3)
	for i := range tokens {
		wg.Go(func() {
			var stdout bytes.Buffer
			cmd := signagent(t, env(), "oidc", "token")
			cmd.Stdout = &stdout
			if code, stderr, _ := runBinary(t, cmd); code != 0 {
				t.Errorf("token %d: exit %d %s", i, code, stderr)
			}
			tokens[i] = strings.TrimSpace(stdout.String())
		})
	}
	wg.Wait()
	after := emu.Stats()
	if n := after.Refreshes - before.Refreshes; n != 1 || tokens[0] != tokens[1] || tokens[1] != tokens[2] || after.RefreshReuses != 0 {
		t.Fatalf("%d refreshes (want 1), tokens %q, %d reused refresh tokens", n, tokens, after.RefreshReuses)
	}

	// A robot starts from a refresh token issued beforehand: no browser.
	oc, err := oidc.New(oidc.Config{AuthURL: emu.URL(), ClientID: "crm-app", ClientSecret: "s3cret-of-the-app", Space: oidc.SpaceStaging})
	if err != nil {
		t.Fatal(err)
	}
	d, err := oc.StartDevice(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.PostForm(emu.URL()+"/device", url.Values{"user_code": {d.UserCode}, "login": {"alice@example.com"},
		"password": {browserPassword}, "decision": {"allow"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	issued, err := oc.PollDevice(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	rtFile := filepath.Join(t.TempDir(), "refresh-token")
	os.WriteFile(rtFile, []byte(issued.RefreshToken+"\n"), 0o600)
	robot := append(env(), "SIGNAGENT_PROFILE=robot")
	if code, stderr, _ := runBinary(t, signagent(t, robot, "oidc", "login", "--refresh-token-file", rtFile)); code != 0 {
		t.Fatalf("login --refresh-token-file: %d %s", code, stderr)
	}
	var robotTok bytes.Buffer
	rt := signagent(t, robot, "oidc", "token")
	rt.Stdout = &robotTok
	if code, stderr, _ := runBinary(t, rt); code != 0 || len(strings.TrimSpace(robotTok.String())) != 64 {
		t.Fatalf("token for the robot: %d %q %s", code, robotTok.String(), stderr)
	}
	// The given token was spent by that refresh (one-time): starting from
	// it again asks to sign in, exit 5.
	if code, stderr, _ := runBinary(t, signagent(t, robot, "oidc", "login", "--refresh-token-file", rtFile)); code != cmdutil.ExitSignIn || strings.Contains(stderr, issued.RefreshToken) {
		t.Fatalf("a spent refresh token: %d %s", code, stderr)
	}

	// Nothing in Redis reads in clear.
	dump := redisDump(t, srv.Addr)
	for _, secret := range append(tokens, "crm", "alice") {
		if strings.Contains(dump, secret) {
			t.Fatalf("%q is in Redis in clear:\n%s", secret, dump)
		}
	}
	_ = os.Remove
}

// TestSharedStoreBadInput: each bad store setting is one line and exit 2,
// and no secret in it.
func TestSharedStoreBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	makeStoreKey(t, good)
	open := filepath.Join(dir, "open.key")
	b, _ := os.ReadFile(good)
	os.WriteFile(open, b, 0o644)
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("abcd\n"), 0o600)
	base := []string{"XDG_STATE_HOME=" + dir, "SIGNAGENT_PROFILE=crm"}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"SIGNAGENT_STORE=redis://app:hunter2@127.0.0.1:6379", "SIGNAGENT_STORE_KEY_FILE=" + good}, "holds a password; give the password with --store-password-file"},
		{[]string{"SIGNAGENT_STORE=memcached://127.0.0.1:1"}, "--store (local, or a shared store's URL): bad store URL: scheme \"memcached\": want redis://"},
		{[]string{"SIGNAGENT_STORE=redis://127.0.0.1:1"}, "needs --store-key-file"},
		{[]string{"SIGNAGENT_STORE=redis://127.0.0.1:1", "SIGNAGENT_STORE_KEY_FILE=" + open}, "chmod go-rwx"},
		{[]string{"SIGNAGENT_STORE=redis://127.0.0.1:1", "SIGNAGENT_STORE_KEY_FILE=" + short}, "not 64 hexadecimal characters"},
		{[]string{"SIGNAGENT_STORE=redis://127.0.0.1:1", "SIGNAGENT_STORE_KEY_FILE=" + filepath.Join(dir, "none")}, "none"},
		// The store password in clear beyond loopback.
		{[]string{"SIGNAGENT_STORE=redis://192.0.2.7:6379", "SIGNAGENT_STORE_KEY_FILE=" + good, "SIGNAGENT_STORE_PASSWORD=hunter2"},
			"the store password would cross the network in clear to 192.0.2.7:6379: use rediss://, rediss+sentinel:// or rediss+cluster:// (TLS), or give --store-insecure"},
		// Two mistakes at once: both, on the one line.
		{[]string{"SIGNAGENT_STORE=redis://127.0.0.1:1", "SIGNAGENT_STORE_PASSWORD_FILE=" + filepath.Join(dir, "nopw")},
			"signagent store-key --out FILE; the store password: "},
	} {
		// token (OpenID Connect records), and api with the legacy scheme
		// (lent the store as every scheme is).
		for _, args := range [][]string{{"oidc", "token"}, {"api", "--scheme", "legacy", "--by", "password", "--login", "a@example.com",
			"--business-url", "http://127.0.0.1:1", "/GetMyOrganizations"}} {
			env := append(slices.Clone(base), "SIGNAGENT_DEVELOPER_KEY=testClient-5a6b7c8d9e", "SIGNAGENT_PASSWORD=pw")
			code, stderr, _ := runBinary(t, signagent(t, append(env, tc.env...), args...))
			if code != cmdutil.ExitBadInput || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "hunter2") {
				t.Errorf("%s %v: exit %d, %q", args[0], tc.env, code, stderr)
			}
		}
	}
	// --store-insecure (here its variable) allows it: the store is then
	// dialed (a test address no one answers at: unreachable).
	code, stderr, _ := runBinary(t, signagent(t, append(base, "SIGNAGENT_STORE=redis://192.0.2.7:6379", "SIGNAGENT_STORE_KEY_FILE="+good,
		"SIGNAGENT_STORE_PASSWORD=hunter2", "SIGNAGENT_STORE_INSECURE=1"), "oidc", "token"))
	if code != cmdutil.ExitTransport || strings.Contains(stderr, "in clear") {
		t.Errorf("--store-insecure: exit %d, %q", code, stderr)
	}
	// A store that does not answer: exit 4 (unreachable), in time.
	code, stderr, _ = runBinary(t, signagent(t, append(base, "SIGNAGENT_STORE=redis://"+storetest.NotRedis(t), "SIGNAGENT_STORE_KEY_FILE="+good), "oidc", "token"))
	if code != cmdutil.ExitTransport || !strings.Contains(stderr, "shared token store is unavailable") {
		t.Errorf("not Redis: exit %d, %q", code, stderr)
	}
}

// redisDump is every key and hash field of a Redis, as text.
func redisDump(t *testing.T, addr string) string {
	t.Helper()
	return storetest.Dump(t, addr)
}

// TestSessionThroughSharedStore: `signagent trusted session --store` and an agent
// on the same store log a user in once between them: the second command
// and the agent get the session the first one stored (the second without
// opening the token), and the emulator issues one auth.sid.
func TestSessionThroughSharedStore(t *testing.T) {
	tk, emu := linkedEmulator(t)
	srv := storetest.Start(t)
	key := filepath.Join(t.TempDir(), "store.key")
	makeStoreKey(t, key)
	t.Setenv("SIGNAGENT_STORE", srv.URL())
	t.Setenv("SIGNAGENT_STORE_KEY_FILE", key)
	code, first, stderr := runSession(tk, emu, "error")
	if code != 0 {
		t.Fatalf("session: %d %s", code, stderr)
	}
	// The second names a PIN file that does not exist: it is not needed.
	var stdout, errOut bytes.Buffer
	code = run([]string{"signagent", "--log-level", "error", "trusted", "session", "--phone", "9161234567", "--service-user-id", "crm-42", "--trusted-url", emu.URL(),
		"--module", tk.Module, "--token-label", tk.Label, "--key-label", tk.RSA.Label, "--pin-file", filepath.Join(t.TempDir(), "no-pin")}, strings.NewReader(""), &stdout, &errOut)
	if code != 0 || stdout.String() != first {
		t.Fatalf("second session: %d %q (first %q) %s", code, stdout.String(), first, errOut.String())
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "a.sock")
	a := startServe(t, signagent(t, append(serveEnv(tk), "SIGNAGENT_STORE="+srv.URL(), "SIGNAGENT_STORE_KEY_FILE="+key, "XDG_STATE_HOME="+dir),
		"serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull, "--trusted-url", emu.URL()), sock)
	eventuallyReady(t, a)
	code, body := a.do("POST", "/v1/sessions", `{"phone":"9161234567","serviceUserId":"crm-42"}`)
	if code != 200 || !strings.Contains(body, `"sid":"`+strings.TrimSpace(first)+`"`) {
		t.Fatalf("the agent: %d %s (want %s)", code, body, first)
	}
	if n := emu.Stats().Sessions; n != 1 {
		t.Fatalf("%d auth.sids for one user through two commands and an agent, want 1", n)
	}
}

// TestLegacyTokenThroughSharedStore: `signagent legacy token --store` run
// twice logs in once: the second prints the token the first stored; api
// and header after them call with it.
func TestLegacyTokenThroughSharedStore(t *testing.T) {
	const devKey = "testClient-5a6b7c8d9e"
	// The cheapest bcrypt cost: the emulator checks the password at every
	// sign-in, and at the default cost that took seconds of CPU under -race.
	hashBytes, _ := bcrypt.GenerateFromPassword([]byte(browserPassword), bcrypt.MinCost)
	hash := string(hashBytes)
	emu := startEmulator(t, &emulator.Config{Developers: []emulator.Developer{{Key: devKey}},
		Users: []emulator.User{{ID: "alice", Login: "alice@example.com", PasswordHash: hash}}})
	srv := storetest.Start(t)
	key := filepath.Join(t.TempDir(), "store.key")
	makeStoreKey(t, key)
	t.Setenv("SIGNAGENT_DEVELOPER_KEY", devKey)
	t.Setenv("SIGNAGENT_PASSWORD", browserPassword)
	t.Setenv("SIGNAGENT_STORE", srv.URL())
	t.Setenv("SIGNAGENT_STORE_KEY_FILE", key)
	tokens := make([]string, 2)
	for i := range tokens {
		var stdout, stderr bytes.Buffer
		code := run([]string{"signagent", "--log-level", "error", "legacy", "token", "--by", "password", "--login", "alice@example.com", "--business-url", emu.URL()},
			strings.NewReader(""), &stdout, &stderr)
		if code != 0 {
			t.Fatalf("legacy token %d: %d %s", i, code, stderr.String())
		}
		tokens[i] = stdout.String()
	}
	if tokens[0] != tokens[1] || emu.Stats().LegacyTokens != 1 {
		t.Fatalf("%q, %d logins (want the same token, 1 login)", tokens, emu.Stats().LegacyTokens)
	}
	// signagent api and header are lent the same store
	// (schemes.Deps.Store): their legacy scheme takes the token
	// legacy token kept there.
	for i, args := range [][]string{
		{"api", "--scheme", "legacy", "--by", "password", "--login", "alice@example.com", "--business-url", emu.URL(), "/GetMyOrganizations?autoRegister=false"},
		{"api", "--scheme", "legacy", "--by", "password", "--login", "alice@example.com", "--business-url", emu.URL(), "/GetMyOrganizations?autoRegister=false"},
		{"header", "--scheme", "legacy", "--by", "password", "--login", "alice@example.com", "--business-url", emu.URL()},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"signagent", "--log-level", "error"}, args...), strings.NewReader(""), &stdout, &stderr)
		if code != 0 {
			t.Fatalf("%s (%d): %d %s", args[0], i, code, stderr.String())
		}
		if args[0] == "header" && !strings.Contains(stdout.String(), "ddauth_token="+strings.TrimSpace(tokens[0])) {
			t.Fatalf("header: %q, want the stored token %q", stdout.String(), tokens[0])
		}
	}
	if n := emu.Stats().LegacyTokens; n != 1 {
		t.Fatalf("signagent api and header through the store logged in again: %d logins, want 1", n)
	}
	// A refused login through the store is refused (exit 3), with nothing
	// on stdout: the login's error was once dropped on this path.
	var stdout, stderr bytes.Buffer
	code := run([]string{"signagent", "--log-level", "error", "legacy", "token", "--by", "password", "--login", "nobody@example.com", "--business-url", emu.URL()},
		strings.NewReader(""), &stdout, &stderr)
	if code != cmdutil.ExitRefused || stdout.Len() != 0 {
		t.Fatalf("unknown login through the store: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// TestServeWithStoreDown: an agent whose shared store does not answer at
// start starts anyway, says so in /readyz (200 degraded: the store is a
// shared dependency, its check not ready with its reason) and in
// `agent status --probe ready` (exit 0), and answers a session by logging
// in itself.
func TestServeWithStoreDown(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	emu := linkedTo(t, tk)
	dir := t.TempDir()
	key := filepath.Join(dir, "store.key")
	makeStoreKey(t, key)
	sock := filepath.Join(dir, "a.sock")
	a := startServe(t, signagent(t, append(serveEnv(tk), "SIGNAGENT_STORE=redis://"+closedAddr(t), "SIGNAGENT_STORE_KEY_FILE="+key, "XDG_STATE_HOME="+dir),
		"serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull, "--trusted-url", emu.URL()), sock)
	var code int
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, body = a.do("GET", "/readyz", ""); strings.Contains(body, `"store":{"ready":false,"reason":"the shared store is unavailable`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != 200 || !strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, `"store":{"ready":false,"reason":"the shared store is unavailable`) ||
		!strings.Contains(body, `"dependency":true`) || !strings.Contains(body, `"token":{"ready":true`) {
		t.Fatalf("readyz with the store down: %d %s", code, body)
	}
	if code, stderr, _ := runBinary(t, signagent(t, []string{"SIGNAGENT_AGENT_SOCK=" + sock}, "agent", "status", "--probe", "ready")); code != 0 || stderr != "" {
		t.Fatalf("agent status --probe ready with the store down: exit %d, %s", code, stderr)
	}
	if code, body := a.do("POST", "/v1/sessions", `{"phone":"9161234567","serviceUserId":"crm-42"}`); code != 200 || emu.Stats().Sessions != 1 {
		t.Fatalf("a session with the store down: %d %s", code, body)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
