package agent_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/agent"
)

// get is one request to the metrics listener at base, without a bearer
// token: its status and body.
func get(t *testing.T, c *http.Client, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsListener: --metrics-listen serves /metrics (signagent_build_info
// with the commit), /livez and /readyz without the bearer token the
// agent's TCP callers need, and 404 to everything else: a signature asked
// of it is refused and the token signs nothing.
func TestMetricsListener(t *testing.T) {
	h := start(t, options{metrics: true, bearer: "0123456789abcdef0123456789abcdef"})
	base := "http://" + h.d.MetricsAddr()
	c := &http.Client{Timeout: 10 * time.Second}
	code, body := get(t, c, "GET", base+"/metrics", "")
	if code != 200 || !strings.Contains(body, `signagent_build_info{goversion="go`) || !strings.Contains(body, `revision="`+testCommit+`"`) {
		t.Fatalf("/metrics: %d, build info with the commit missing:\n%.2000s", code, body)
	}
	if code, body := get(t, c, "GET", base+"/livez", ""); code != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("/livez: %d %s", code, body)
	}
	if code, body := get(t, c, "GET", base+"/readyz", ""); code != 200 || !strings.Contains(body, `"status":"ready"`) {
		t.Errorf("/readyz: %d %s", code, body)
	}
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/signatures", `{"phone":"9161234567"}`},
		{"POST", "/v1/sessions", `{"phone":"9161234567","serviceUserId":"crm-42"}`},
		{"GET", "/v1/service/GetMyOrganizations", ""},
		{"GET", "/v1/identities", ""},
		{"GET", "/healthz", ""},
		{"GET", "/", ""},
	} {
		if code, body := get(t, c, tc.method, base+tc.path, tc.body); code != 404 || !strings.Contains(body, `"code":"not_found"`) {
			t.Errorf("%s %s on the metrics listener: %d %s", tc.method, tc.path, code, body)
		}
	}
	if code, _ := get(t, c, "POST", base+"/metrics", ""); code != 405 {
		t.Errorf("POST /metrics: %d", code)
	}
	if got := h.metric(t, "signagent_sign_duration_seconds_count"); got != "0" {
		t.Errorf("the token signed %s times after requests to the metrics listener", got)
	}
	// The API's TCP listener still wants the token.
	if code, _ := get(t, c, "GET", "http://"+strings.TrimPrefix(h.tcp, "tcp:")+"/metrics", ""); code != 401 {
		t.Errorf("/metrics on the API's TCP listener without the token: %d", code)
	}
}

// TestMetricsListenerTLS: with the TLS files the metrics listener speaks
// TLS only; without them it refuses an address beyond loopback, and an
// address that is not HOST:PORT is a configuration error.
func TestMetricsListenerTLS(t *testing.T) {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	cf, kf := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)

	h := start(t, options{metrics: true, tls: agent.TLSFiles{Cert: cf, Key: kf}, noToken: true, oidc: true})
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	if code, body := get(t, c, "GET", "https://"+h.d.MetricsAddr()+"/metrics", ""); code != 200 || !strings.Contains(body, "signagent_build_info") {
		t.Fatalf("/metrics over TLS: %d %.500s", code, body)
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	if resp, err := plain.Get("http://" + h.d.MetricsAddr() + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("/metrics answered over plain HTTP with TLS configured")
		}
	}

	for spec, want := range map[string]string{
		"0.0.0.0:0": "refusing to listen beyond loopback without TLS",
		"9464":      `--metrics-listen "9464": want HOST:PORT, e.g. 127.0.0.1:9464 (missing port in address)`,
	} {
		cfg := h.cfg
		cfg.TLS, cfg.MetricsListen = agent.TLSFiles{}, spec
		cfg.Listen = []string{"unix:" + filepath.Join(dir, "other.sock")}
		d, err := agent.Start(context.Background(), cfg)
		if err == nil {
			d.Shutdown(context.Background())
			t.Errorf("--metrics-listen %s: started", spec)
			continue
		}
		if !errors.Is(err, agent.ErrConfig) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--metrics-listen") || strings.Contains(err.Error(), "%!") {
			t.Errorf("--metrics-listen %s: %v", spec, err)
		}
	}
}
