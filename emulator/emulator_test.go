package emulator

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/signer/signertest"
)

// The emulator's tests run in parallel: each starts its own server on a
// port of its own, with its own clock, configuration and files, and none
// sets the environment.

// TestOpenSSLSignatures sends step 1 with signatures made by
// `openssl cms -sign -binary`, with and without signed attributes, as the
// maker's RSA clients do.
func TestOpenSSLSignatures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ossl := signertest.NeedTool(t, "openssl")
	key, crt := filepath.Join(dir, "k.pem"), filepath.Join(dir, "c.pem")
	if out, err := exec.Command(ossl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
		"-subj", "/CN=partner", "-days", "2").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cfgPath := filepath.Join(dir, "emulator.yaml")
	os.WriteFile(cfgPath, []byte(`
partners:
  - name: p
    apiKey: ABCDEF-123
    certificates: [c.pem]
users:
  - id: u1
    snils: 112-233-445 95
    linked: ["p:crm-1"]
`), 0o600)
	cfg, err := LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())

	stamp := canonical.FormatTimestamp(canonical.Now())
	text := "apikey=abcdef-123\r\nid=11223344595\r\ntimestamp=" + stamp + "\r\n"
	in := filepath.Join(dir, "text")
	os.WriteFile(in, []byte(text), 0o600)
	for _, tc := range []struct {
		name   string
		extra  []string
		tamper bool
		status int
	}{
		{"signed attributes", nil, false, 200},
		{"no attributes", []string{"-noattr"}, false, 200},
		{"SHA-512", []string{"-md", "sha512"}, false, 200},
		{"tampered", nil, true, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig := filepath.Join(dir, "sig.der")
			args := append([]string{"cms", "-sign", "-binary", "-in", in, "-signer", crt, "-inkey", key, "-outform", "DER", "-out", sig}, tc.extra...)
			if out, err := exec.Command(ossl, args...).CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			der, _ := os.ReadFile(sig)
			if tc.tamper {
				der[len(der)-5] ^= 0xff
			}
			u := s.URL() + "/auth/v5.16/authenticate-by-truster?apiKey=ABCDEF-123&snils=11223344595&timestamp=" +
				strings.ReplaceAll(url.QueryEscape(stamp), "+", "%20") + "&serviceUserId=crm-1"
			resp, err := http.Post(u, "application/octet-stream", strings.NewReader(string(der)))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d %s, want %d", resp.StatusCode, body, tc.status)
			}
			if tc.status == 200 && !strings.Contains(string(body), `"Key":"`) {
				t.Fatalf("body %s", body)
			}
		})
	}
}

func TestLoadConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, _ := selfSignedPEM(t)
	os.WriteFile(filepath.Join(dir, "c.pem"), k, 0o600)
	for name, body := range map[string]string{
		"no partners":       "users: []\n",
		"no trust":          "partners: [{name: p, apiKey: K}]\n",
		"empty key":         "partners: [{name: p, apiKey: ' ', certificates: [c.pem]}]\n",
		"duplicate key":     "partners: [{name: a, apiKey: K, certificates: [c.pem]}, {name: b, apiKey: k, certificates: [c.pem]}]\n",
		"missing cert file": "partners: [{name: p, apiKey: K, certificates: [nope.pem]}]\n",
		"unknown field":     "partners: [{name: p, apiKey: K, certificates: [c.pem], colour: red}]\n",
		"bad phone":         "partners: [{name: p, apiKey: K, certificates: [c.pem]}]\nusers: [{id: u, phone: '12'}]\n",
		"bad link":          "partners: [{name: p, apiKey: K, certificates: [c.pem]}]\nusers: [{id: u, linked: ['q:1']}]\n",
		"bad duration":      "partners: [{name: p, apiKey: K, certificates: [c.pem]}]\nkeyTTL: soon\n",
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, "cfg.yaml")
			os.WriteFile(p, []byte(body), 0o600)
			if _, err := LoadConfig(p); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	p := filepath.Join(dir, "ok.yaml")
	os.WriteFile(p, []byte("partners: [{name: p, apiKey: K, certificates: [c.pem]}]\ntimestampSkew: 30s\n"), 0o600)
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(cfg.TimestampSkew) != 30*time.Second || time.Duration(cfg.KeyTTL) != 5*time.Minute {
		t.Fatalf("durations %v %v", cfg.TimestampSkew, cfg.KeyTTL)
	}
}

func selfSignedPEM(t *testing.T) ([]byte, error) {
	dir := t.TempDir()
	out, err := exec.Command(signertest.NeedTool(t, "openssl"), "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
		"-nodes", "-keyout", filepath.Join(dir, "k"), "-subj", "/CN=x", "-days", "1").Output()
	return out, err
}
