package main

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/oidc"
)

// hostileProvider is a stand-in identity provider that misbehaves in the
// ways the emulator (a well-behaved provider) cannot be made to: a key
// set that never ends, a device authorization whose addresses carry
// terminal escape sequences or are not URLs. It counts what it sent.
type hostileProvider struct {
	url         string
	key         *rsa.PrivateKey
	mu          sync.Mutex
	device      map[string]any // under mu
	jwksBytes   atomic.Int64
	devicePolls atomic.Int64
}

func newHostileProvider(t *testing.T) *hostileProvider {
	t.Helper()
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	p := &hostileProvider{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": p.url, "authorization_endpoint": p.url + "/connect/authorize",
			"token_endpoint": p.url + "/connect/token", "jwks_uri": p.url + "/jwks", "device_authorization_endpoint": p.url + "/connect/deviceauthorization"})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"keys":[`))
		chunk := []byte(strings.Repeat(`{"kty":"oct","k":"AAAA"},`, 1000))
		for p.jwksBytes.Load() < 64<<20 { // a client without a limit fails the test rather than hanging it
			n, err := w.Write(chunk)
			p.jwksBytes.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	mux.HandleFunc("POST /connect/deviceauthorization", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		p.mu.Lock()
		defer p.mu.Unlock()
		json.NewEncoder(w).Encode(p.device)
	})
	mux.HandleFunc("POST /connect/token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		if r.Form.Get("grant_type") != "refresh_token" {
			p.devicePolls.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"authorization_pending"}`))
			return
		}
		sig, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
		payload, _ := json.Marshal(map[string]any{"iss": p.url, "sub": "alice", "aud": "crm-app",
			"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()})
		obj, _ := sig.Sign(payload)
		idt, _ := obj.CompactSerialize()
		json.NewEncoder(w).Encode(map[string]any{"access_token": strings.Repeat("a", 64), "token_type": "Bearer",
			"expires_in": 3600, "refresh_token": "rt2", "id_token": idt, "scope": "openid offline_access staging"})
	})
	// The address is known before the server serves: the handlers read
	// p.url, and requests from another process give the race detector no
	// order between this write and those reads.
	s := httptest.NewUnstartedServer(mux)
	p.url = "http://" + s.Listener.Addr().String()
	s.Start()
	t.Cleanup(s.Close)
	return p
}

func (p *hostileProvider) setDevice(m map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.device = m
}

func (p *hostileProvider) env(t *testing.T) []string {
	return []string{"XDG_STATE_HOME=" + t.TempDir(), "SIGNAGENT_OIDC_URL=" + p.url, "SIGNAGENT_CLIENT_ID=crm-app",
		"SIGNAGENT_CLIENT_SECRET=s3cret-of-the-app", "SIGNAGENT_SPACE=staging", "DISPLAY=", "WAYLAND_DISPLAY=", "BROWSER="}
}

// TestTokenRefreshEndlessKeySet: `signagent oidc token` refreshing an expired
// access token meets a provider whose key set never ends; it fails in one
// line (exit 4) after reading about a megabyte of it, not the 64 MiB
// offered.
func TestTokenRefreshEndlessKeySet(t *testing.T) {
	t.Parallel()
	p := newHostileProvider(t)
	env := p.env(t)
	state := strings.TrimPrefix(env[0], "XDG_STATE_HOME=") + "/signagent"
	rec := &oidc.Record{Profile: "default", AuthURL: p.url, ClientID: "crm-app", Subject: "alice", Scopes: []string{"openid", "offline_access", "staging"},
		AccessToken: strings.Repeat("o", 64), TokenType: "Bearer", Expiry: time.Now().Add(-time.Hour), RefreshToken: "rt1",
		SignedInAt: time.Now().Add(-2 * time.Hour)}
	if err := (oidc.Files{Dir: state}).Save(rec); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd := signagent(t, env, "oidc", "token")
	cmd.Stdout = &stdout
	code, stderr, _ := runBinary(t, cmd)
	if code != cmdutil.ExitTransport || stdout.Len() != 0 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 ||
		!strings.Contains(stderr, "larger than signagent reads") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr)
	}
	if n := p.jwksBytes.Load(); n > 16<<20 {
		t.Fatalf("signagent took %d MiB of the endless key set", n>>20)
	}
}

// TestLoginDeviceHostileText: a device authorization whose addresses hold
// terminal escape sequences, or are a javascript: URL, ends `signagent
// login` with one line (exit 4) and no escape byte on either stream; an
// interval of 10^10 seconds makes no poll storm (no poll before the code
// expires).
func TestLoginDeviceHostileText(t *testing.T) {
	t.Parallel()
	p := newHostileProvider(t)
	for name, edit := range map[string]func(map[string]any){
		"escape":     func(m map[string]any) { m["verification_uri"] = p.url + "/device\x1b]0;owned\x07\x1b[2J" },
		"javascript": func(m map[string]any) { m["verification_uri_complete"] = "javascript:alert(document.cookie)" },
	} {
		t.Run(name, func(t *testing.T) {
			device := map[string]any{"device_code": "dc", "user_code": "ABCDEFGH", "verification_uri": p.url + "/device",
				"verification_uri_complete": p.url + "/device?user-code=ABCDEFGH", "expires_in": 300, "interval": 5}
			edit(device)
			p.setDevice(device)
			var stdout bytes.Buffer
			cmd := signagent(t, p.env(t), "oidc", "login", "--no-qr")
			cmd.Stdout = &stdout
			code, stderr, _ := runBinary(t, cmd)
			if code != cmdutil.ExitTransport || strings.ContainsAny(stdout.String()+stderr, "\x1b\x07") ||
				!strings.Contains(stderr, "verification address signagent will not show") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr)
			}
		})
	}
	p.setDevice(map[string]any{"device_code": "dc", "user_code": "ABCDEFGH", "verification_uri": p.url + "/device",
		"expires_in": 3, "interval": int64(1e10)})
	cmd := signagent(t, p.env(t), "oidc", "login", "--no-qr")
	code, stderr, _ := runBinary(t, cmd)
	if code != cmdutil.ExitSignIn || p.devicePolls.Load() != 0 {
		t.Fatalf("exit %d (want %d), %d polls: %s", code, cmdutil.ExitSignIn, p.devicePolls.Load(), stderr)
	}
}
