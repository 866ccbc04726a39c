package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/doctorcmd"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

const (
	doctorDevKey   = "testClient-0a1b2c3d4e"
	doctorClientID = "crm-app"
	doctorSecret   = "client-secret-of-crm"
)

// doctorRig is a real SoftHSM token and the emulator (trusted, legacy and
// identity provider sides), with the files of a context that works: the
// API key, developer key, client secret and PIN in files of mode 0600.
type doctorRig struct {
	tk   *pkcs11test.Token
	emu  *emulatortest.Server
	dir  string
	args []string // doctor's flags for the good context
}

func newDoctorRig(t *testing.T) *doctorRig {
	t.Helper()
	tk := pkcs11test.New(t)
	emu := emulatortest.New(t, &emulator.Config{
		Partners:   []emulator.Partner{{Name: "p", APIKey: testAPIKey, Certificates: []string{string(signertest.PEM(tk.RSA.Cert))}}},
		Developers: []emulator.Developer{{Name: "crm", Key: doctorDevKey}},
		Users:      []emulator.User{{ID: "u1", Phone: "9161234567", Linked: []string{"p:crm-42"}}},
		OIDC:       emulator.OIDCConfig{Clients: []emulator.OIDCClient{{ID: doctorClientID, Secret: doctorSecret, RedirectURIs: []string{"http://127.0.0.1:8765/callback"}}}},
	})
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("SIGNAGENT_API_KEY", "")
	r := &doctorRig{tk: tk, emu: emu, dir: dir}
	r.args = []string{"--trusted-url", emu.URL(), "--business-url", emu.URL(), "--oidc-url", emu.URL(), "--client-id", doctorClientID,
		"--api-key-file", write("api-key", testAPIKey), "--developer-key-file", write("developer-key", doctorDevKey),
		"--client-secret-file", write("client-secret", doctorSecret), "--token-store", filepath.Join(dir, "state"),
		"--module", tk.Module, "--token-label", tk.Label, "--key-label", tk.RSA.Label, "--pin-file", tk.PINFile}
	return r
}

// doctor runs `signagent doctor --json` in process with the rig's
// context and extra flags after it, and returns the exit status, the
// checks by name and stderr.
func (r *doctorRig) doctor(t *testing.T, extra ...string) (int, map[string]doctorcmd.Check, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args := append(append([]string{"signagent", "doctor", "--json"}, r.args...), extra...)
	code := run(args, strings.NewReader(""), &stdout, &stderr)
	var list []doctorcmd.Check
	if err := json.Unmarshal(stdout.Bytes(), &list); err != nil {
		t.Fatalf("exit %d, stdout not a JSON list of checks: %v\n%s\nstderr: %s", code, err, stdout.String(), stderr.String())
	}
	checks := map[string]doctorcmd.Check{}
	for _, c := range list {
		if c.Status != doctorcmd.OK && c.Status != doctorcmd.Warn && c.Status != doctorcmd.Fail {
			t.Fatalf("check %+v: status not ok, warn or fail", c)
		}
		checks[c.Name] = c
	}
	for _, secret := range []string{testAPIKey, doctorDevKey, doctorSecret, r.tk.PIN} {
		if strings.Contains(stdout.String()+stderr.String(), secret) {
			t.Fatalf("a secret in doctor's output: %s %s", stdout.String(), stderr.String())
		}
	}
	return code, checks, stderr.String()
}

// want says that check name has status and a detail matching pattern.
func want(t *testing.T, checks map[string]doctorcmd.Check, name, status, pattern string) {
	t.Helper()
	c, ok := checks[name]
	if !ok || c.Status != status || !regexp.MustCompile(pattern).MatchString(c.Detail) {
		t.Errorf("check %s = %+v, want %s matching %q", name, c, status, pattern)
	}
}

// TestDoctor: doctor on a context that works says ok for each part (the
// profile not signed in is a warning), exits 0 and changes nothing: no
// session, challenge, token or registration at the emulator, no file
// written. Each bad input fails its own check with what to do, exit 1:
// the emulator's clock 90 s and 600 s ahead of this machine's (10 s is a
// warning, exit 0), a key file of the wrong mode, an unreachable identity
// provider, keys the service does not accept.
func TestDoctor(t *testing.T) {
	r := newDoctorRig(t)

	t.Run("good", func(t *testing.T) {
		code, checks, stderr := r.doctor(t)
		if code != cmdutil.ExitOK || stderr != "" {
			t.Fatalf("exit %d, stderr %q, checks %+v", code, stderr, checks)
		}
		want(t, checks, "settings", "ok", `settings file`)
		want(t, checks, "api-key", "ok", `^read from the file .*api-key \(--api-key-file\)$`)
		want(t, checks, "pin", "ok", `not tried`)
		for _, name := range []string{"trusted-url", "business-url", "oidc-url"} {
			want(t, checks, name, "ok", `^http://127\.0\.0\.1:\d+ answered HTTP \d+ in .*plain http`)
		}
		want(t, checks, "clock", "ok", `^this machine's clock (agrees with the service's to the second|is 1s (behind|ahead of) the service's) \(within 5s\)$`)
		want(t, checks, "api-key accepted", "ok", `accepts the API key`)
		want(t, checks, "developer-key accepted", "ok", `knows the developer key`)
		want(t, checks, "token", "ok", `^token "`+r.tk.Label+`" .* is there; no wrong PIN reported$`)
		want(t, checks, "certificate", "ok", `is valid until \d{4}-`)
		want(t, checks, "oidc discovery", "ok", `discovery document is read`)
		want(t, checks, "oidc profile", "warn", `not signed in`)
		st := r.emu.Stats()
		if st.Challenges+st.Sessions+st.Links+st.LegacyTokens+st.LegacyChallenges+st.AccessTokens+st.Refreshes+st.Registrations != 0 {
			t.Fatalf("doctor changed the service: %+v", st)
		}
		if _, err := os.Stat(filepath.Join(r.dir, "state")); !os.IsNotExist(err) {
			t.Fatalf("the token store was made: %v", err)
		}
	})

	t.Run("text", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"signagent", "doctor"}, r.args...), strings.NewReader(""), &stdout, &stderr)
		if code != 0 || !regexp.MustCompile(`(?m)^ok    clock: this machine's clock .*\n`).MatchString(stdout.String()) ||
			!regexp.MustCompile(`(?m)^warn  oidc profile: `).MatchString(stdout.String()) {
			t.Fatalf("exit %d\n%s%s", code, stdout.String(), stderr.String())
		}
	})

	for _, tc := range []struct {
		ahead  time.Duration
		code   int
		status string
		detail string
	}{
		{10 * time.Second, cmdutil.ExitOK, "warn", `^this machine's clock is (10|11)s behind the service's: more than 5s`},
		{90 * time.Second, cmdutil.ExitFailure, "fail", `^this machine's clock is 1m3[01]s behind the service's: the service refuses timestamps this far off; set the clock`},
		{-600 * time.Second, cmdutil.ExitFailure, "fail", `^this machine's clock is (10m0s|9m59s) ahead of the service's`},
		{600 * time.Second, cmdutil.ExitFailure, "fail", `^this machine's clock is 10m[01]s behind the service's`},
	} {
		t.Run("clock "+tc.ahead.String(), func(t *testing.T) {
			r.emu.SetClock(func() time.Time { return time.Now().Add(tc.ahead) })
			defer r.emu.SetClock(time.Now)
			code, checks, stderr := r.doctor(t)
			want(t, checks, "clock", tc.status, tc.detail)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; %s", code, tc.code, stderr)
			}
			if tc.code != 0 && stderr != "signagent: doctor: 1 of 16 checks failed: clock\n" {
				t.Fatalf("stderr %q", stderr)
			}
		})
	}

	t.Run("key file of the wrong mode", func(t *testing.T) {
		open := filepath.Join(r.dir, "open-api-key")
		os.WriteFile(open, []byte(testAPIKey+"\n"), 0o600)
		os.Chmod(open, 0o644)
		code, checks, _ := r.doctor(t, "--api-key-file", open)
		want(t, checks, "api-key", "fail", `open-api-key has mode 0644; run chmod o-rwx .*open-api-key$`)
		if code != cmdutil.ExitFailure {
			t.Fatalf("exit %d", code)
		}
	})

	t.Run("unreachable identity provider", func(t *testing.T) {
		code, checks, _ := r.doctor(t, "--oidc-url", "http://127.0.0.1:1")
		want(t, checks, "oidc-url", "fail", `^could not reach the identity provider at http://127\.0\.0\.1:1: .*refused; check the address`)
		want(t, checks, "oidc discovery", "fail", `127\.0\.0\.1:1`)
		want(t, checks, "trusted-url", "ok", `answered`)
		if code != cmdutil.ExitFailure {
			t.Fatalf("exit %d", code)
		}
	})

	t.Run("keys the service does not accept", func(t *testing.T) {
		code, checks, _ := r.doctor(t, "--api-key-file", writeSecret(t, r.dir, "other-api-key", "11111111-2222-3333-4444-555555555555"),
			"--developer-key-file", writeSecret(t, r.dir, "other-dev-key", "testClient-unknown"))
		want(t, checks, "api-key accepted", "fail", `HTTP 403 InvalidApiKey: the service does not accept this API key`)
		want(t, checks, "developer-key accepted", "fail", `HTTP 401`)
		if code != cmdutil.ExitFailure {
			t.Fatalf("exit %d", code)
		}
	})

	t.Run("agent config", func(t *testing.T) {
		// Others may read the bearer token (a group may when root owns
		// the file: TestDoctorAgentFilesAsServe); the audit log is a
		// symlink (auditlog.Open's rules).
		bearer := writeSecret(t, r.dir, "bearer", "0123456789abcdef0123456789abcdef")
		os.Chmod(bearer, 0o604)
		audit := filepath.Join(r.dir, "audit.log")
		os.Symlink(bearer, audit)
		cfg := writeSecret(t, r.dir, "agent.yaml", "bearer-token-file: "+bearer+"\naudit-log: "+audit+"\n")
		code, checks, _ := r.doctor(t, "--agent-config", cfg)
		want(t, checks, "settings", "ok", `^the agent's settings file .*agent\.yaml`)
		want(t, checks, "bearer-token-file", "fail", `bearer has mode 0604; run chmod o-rwx`)
		want(t, checks, "audit-log", "fail", `^the audit log .*audit\.log is a symlink; give the file itself$`)
		if code != cmdutil.ExitFailure {
			t.Fatalf("exit %d", code)
		}
		code, checks, _ = r.doctor(t, "--agent-config", filepath.Join(r.dir, "missing.yaml"))
		want(t, checks, "settings", "fail", `missing\.yaml`)
		if code != cmdutil.ExitFailure || len(checks) != 1 {
			t.Fatalf("exit %d, %d checks", code, len(checks))
		}
	})

	t.Run("token not there", func(t *testing.T) {
		code, checks, _ := r.doctor(t, "--token-label", "nope")
		want(t, checks, "token", "fail", `token "nope" is not there; the module sees "`+r.tk.Label+`"`)
		if _, ok := checks["certificate"]; code != cmdutil.ExitFailure || ok {
			t.Fatalf("exit %d, checks %+v", code, checks)
		}
		// The token's serial is not its: not the first token's flags
		// reported as ok (the old doctor took an empty TokenInfo).
		code, checks, _ = r.doctor(t, "--token-serial", "0000")
		want(t, checks, "token", "fail", `^token not found: token label "`+r.tk.Label+`" serial "0000" is not there`)
		if code != cmdutil.ExitFailure {
			t.Fatalf("exit %d", code)
		}
	})

	t.Run("key not there", func(t *testing.T) {
		code, checks, _ := r.doctor(t, "--key-label", "absent")
		want(t, checks, "token", "ok", `^token "`+r.tk.Label+`" \(serial \w+, slot \d+\) .* is there`)
		want(t, checks, "certificate", "fail", `^key not found: no public key labelled "absent" on token "`+r.tk.Label+`"`)
		if code != cmdutil.ExitFailure {
			t.Fatalf("exit %d", code)
		}
	})
}

func writeSecret(t *testing.T, dir, name, v string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDoctorStore: with a shared store (a real redis-server), doctor pings
// it and tries the key on the profile's record: the key that sealed it
// opens it (ok), another key does not (fail, exit 1), and a stopped store
// fails its check. Nothing is written to the store.
func TestDoctorStore(t *testing.T) {
	r := newDoctorRig(t)
	rs := storetest.Start(t)
	keyA, keyB := filepath.Join(r.dir, "store-a.key"), filepath.Join(r.dir, "store-b.key")
	for _, k := range []string{keyA, keyB} {
		if err := store.NewKeyFile(k); err != nil {
			t.Fatal(err)
		}
	}
	sealer, err := store.LoadKeyFile(keyA)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(rs.URL(), store.Options{Sealer: sealer, WaitReplicas: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec := &oidc.Record{Profile: "default", AuthURL: r.emu.URL(), ClientID: doctorClientID, Subject: "u1", AccessToken: "at-of-u1",
		TokenType: "Bearer", Expiry: time.Now().Add(time.Hour), RefreshToken: "rt-of-u1", SignedInAt: time.Now()}
	if err := (&oidc.InStore{S: st, Name: rs.URL()}).Save(rec); err != nil {
		t.Fatal(err)
	}
	before := storetest.Dump(t, rs.Addr)

	code, checks, stderr := r.doctor(t, "--store", rs.URL(), "--store-key-file", keyA)
	want(t, checks, "store-key-file", "ok", `store-a\.key holds a store key`)
	want(t, checks, "store", "ok", `^redis://.* answers$`)
	want(t, checks, "store key", "ok", `^the 1 records looked at are sealed with a key in .*store-a\.key$`)
	want(t, checks, "oidc profile", "ok", `^profile default \(u1\), signed in .*: a refresh token is held .*it lapses by .* at the earliest \(--refresh-token-lifetime 720h0m0s\)$`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// The refresh token's lifetime (the provider does not say it): within
	// 7 days a warning, past it a failure, naming the sign-in to run.
	_, checks, _ = r.doctor(t, "--store", rs.URL(), "--store-key-file", keyA, "--refresh-token-lifetime", "72h")
	want(t, checks, "oidc profile", "warn", `: the refresh token lapses by .* \(within 7 days\); sign in again before then: signagent oidc login --profile default$`)
	code, checks, _ = r.doctor(t, "--store", rs.URL(), "--store-key-file", keyA, "--refresh-token-lifetime", "1ms")
	want(t, checks, "oidc profile", "fail", `: the refresh token lapsed by .* \(--refresh-token-lifetime 1ms from its last use\); sign in again: signagent oidc login --profile default$`)
	if code != 1 {
		t.Fatalf("a lapsed refresh token: exit %d, want 1", code)
	}

	code, checks, _ = r.doctor(t, "--store", rs.URL(), "--store-key-file", keyB)
	want(t, checks, "store key", "fail", `^1 of the 1 records looked at are sealed with a key not in .*store-b\.key`)
	if code != cmdutil.ExitFailure {
		t.Fatalf("exit %d", code)
	}
	if after := storetest.Dump(t, rs.Addr); after != before {
		t.Fatalf("doctor wrote to the store:\nbefore %s\nafter  %s", before, after)
	}

	rs.Stop()
	code, checks, _ = r.doctor(t, "--store", rs.URL(), "--store-key-file", keyA)
	want(t, checks, "store", "fail", `check the address, the password and that Redis runs$`)
	if code != cmdutil.ExitFailure {
		t.Fatalf("exit %d", code)
	}
}
