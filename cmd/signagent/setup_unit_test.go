package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/cmd/signagent/internal/clitest"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
)

// TestUserUnitServesSetupContext: after signagent setup, the per-user
// agent starts as `systemctl --user enable --now signagent.socket` starts
// it and serves with the context setup wrote. There is no user systemd
// here: the units in packaging/systemd-user are read, the service's
// ExecStart is run as written (its specifiers expanded as the user manager
// does, /usr/bin/signagent being this build) under systemd-socket-activate
// on the socket unit's ListenStream, with what the user manager gives a
// service (HOME, XDG_RUNTIME_DIR, PATH) and nothing else: no SOFTHSM2_CONF,
// no SIGNAGENT_* variable.
func TestUserUnitServesSetupContext(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	runtime := filepath.Join(home, "run")
	if err := os.Mkdir(runtime, 0o700); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("signagent", args...)
		cmd.Dir, cmd.Env = home, env
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("signagent %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return string(out)
	}
	base := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	// eval "$(signagent token dev --dir hsm)", as an operator starts.
	shell := append([]string{}, base...)
	for _, l := range strings.Split(run(base, "token", "dev", "--dir", "hsm"), "\n") {
		if kv, ok := strings.CutPrefix(l, "export "); ok {
			k, v, _ := strings.Cut(kv, "=")
			shell = append(shell, k+"="+strings.Trim(v, "'"))
		}
	}
	for name, body := range map[string]string{"apikey": testAPIKey + "\n", "devkey": "testClient-5f1d2c3b4a\n", "secret": "s3cret-of-the-app\n",
		"emulator.yaml": setupUnitEmulator} {
		if err := os.WriteFile(filepath.Join(home, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := emulator.LoadConfig(filepath.Join(home, "emulator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	emu, err := emulator.New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emu.Close(context.Background()) })
	u := emu.URL()
	run(append(shell, "SIGNAGENT_API_KEY_FILE=apikey"), "setup", "--non-interactive", "--context", "work", "--space", "staging",
		"--trusted-url", u, "--business-url", u, "--oidc-url", u, "--client-id", "crm-app", "--client-secret-file", "secret", "--developer-key-file", "devkey")

	listen := unitLine(t, "signagent.socket", "ListenStream")
	exec := strings.Fields(unitLine(t, "signagent.service", "ExecStart"))
	if len(exec) < 2 || exec[0] != "/usr/bin/signagent" {
		t.Fatalf("ExecStart = %q: want /usr/bin/signagent ...", exec)
	}
	// The user manager's specifiers: %E config, %S state, %t runtime, %h home.
	spec := strings.NewReplacer("%E", filepath.Join(home, ".config"), "%S", filepath.Join(home, ".local", "state"), "%t", runtime, "%h", home)
	listen = spec.Replace(listen)
	for i := range exec {
		exec[i] = spec.Replace(exec[i])
	}
	// StateDirectory=signagent, StateDirectoryMode=0700; the socket's
	// DirectoryMode=0700.
	for _, d := range []string{filepath.Join(home, ".local", "state", "signagent"), filepath.Dir(listen)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	argv := []string{"-l", listen, "-E", "PATH", "-E", "HOME=" + home, "-E", "XDG_RUNTIME_DIR=" + runtime, "signagent"}
	agent := startLogged(t, "systemd-socket-activate", append(argv, exec[1:]...)...)
	// A connection, not the socket's file: systemd-socket-activate binds
	// (the file appears) before it listens, and a connection between the
	// two is refused (seen under load). The first connection starts the
	// agent, which reads it closed.
	if !clitest.Poll(10*time.Second, func() bool {
		c, err := net.Dial("unix", listen)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("systemd-socket-activate does not listen at %s: %s", listen, agent)
	}

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", listen)
	}}}
	get := func(method, path, body string, header ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://agent"+path, strings.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v\nagent: %s", method, path, err, agent)
		}
		defer resp.Body.Close()
		var sb strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			sb.WriteString(sc.Text())
		}
		return resp.StatusCode, sb.String()
	}
	if code, body := get("GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz: %d %s\nagent: %s", code, body, agent)
	}
	// A session: the token (module, key, PIN file, SoftHSM's
	// configuration), the API key and the base URL, all from the context.
	code, body := get("POST", "/v1/sessions", `{"snils":"112-233-445 95","serviceUserId":"crm-42"}`)
	var sess struct{ Sid string }
	if json.Unmarshal([]byte(body), &sess); code != 200 || len(sess.Sid) < 20 {
		t.Fatalf("POST /v1/sessions: %d %s\nagent: %s", code, body, agent)
	}
	// A business call through the proxy: the API URL and the developer key.
	code, body = get("GET", "/v1/service/GetMyOrganizations?autoRegister=false", "",
		"Signagent-Identity", "trusted snils=11223344595 serviceUserId=crm-42")
	if code != 200 || !strings.Contains(body, "Horns and Hooves LLC") || strings.Contains(body, "Someone Else") {
		t.Fatalf("GetMyOrganizations through the proxy: %d %s\nagent: %s", code, body, agent)
	}
	if _, err := os.Stat(filepath.Join(home, ".local", "state", "signagent", "audit.log")); err != nil {
		t.Errorf("the unit's audit log: %v", err)
	}
}

// startLogged starts name args... with this process's environment, its
// output kept for the failure messages, and kills it at the end.
func startLogged(t *testing.T, name string, args ...string) *pkcs11test.LogBuffer {
	t.Helper()
	cmd := exec.Command(name, args...)
	out := &pkcs11test.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return out
}

// unitLine is key's value in packaging/systemd-user/unit (one line each).
func unitLine(t *testing.T, unit, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "packaging", "systemd-user", unit))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			return v
		}
	}
	t.Fatalf("%s has no %s=", unit, key)
	return ""
}

const setupUnitEmulator = `partners:
  - name: p
    apiKeyFile: apikey
    certificates: [hsm/cert.pem]
developers:
  - name: crm
    keyFile: devkey
oidc:
  clients:
    - id: crm-app
      secretFile: secret
users:
  - id: alice
    snils: "112-233-445 95"
    linked: ["p:crm-42"]
    certificates: [hsm/cert.pem]
    boxes: [6a2c1c9e-1111-4a5b-9c3d-0123456789ab]
organizations:
  - id: org-1
    fullName: Horns and Hooves LLC
    boxes: [{guid: 6a2c1c9e-1111-4a5b-9c3d-0123456789ab}]
  - id: org-2
    fullName: Someone Else JSC
    boxes: [{guid: 7d1e2f30-4a5b-4c6d-8e9f-0a1b2c3d4e5f}]
`
