package agent_test

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/signer/signertest"
)

// TestCertificateLoginDocumentWindows: a hostile business API sends, as
// certificate-login challenges, windows of a document sealed to the
// token's RSA certificate by OpenSSL (issue 45, item 0), through the
// proxy's `Signagent-Identity: legacy certificate` and through
// /v1/authorizations. None of the document reaches AuthenticateConfirm,
// the token opens the document's key transport once at most, each login
// is an audit line with the key transport's hash and its outcome, and the
// metric counts them. With the legacy header not exposed,
// /v1/authorizations answers 403 before any challenge is asked for.
func TestCertificateLoginDocumentWindows(t *testing.T) {
	doc := make([]byte, 1024)
	rand.Read(doc)
	type win struct{ off, n int }
	var windows []win
	for _, n := range []int{16, 32, 48, 256} {
		for _, off := range []int{0, 512} {
			windows = append(windows, win{off, n})
		}
	}
	var (
		mu               sync.Mutex
		der              []byte
		next, cur        int
		confirms, leaked int
		challengesSent   atomic.Int32
	)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/V3/Authenticate":
			challengesSent.Add(1)
			cur = next % len(windows)
			next++
			w.Write(signertest.EnvelopeWindow(t, der, 16, windows[cur].off, windows[cur].n))
		case "/V3/AuthenticateConfirm":
			confirms++
			got, _ := base64.StdEncoding.DecodeString(r.URL.Query().Get("token"))
			for i := range min(len(got), windows[cur].n) {
				if got[i] == doc[windows[cur].off+i] {
					leaked++
				}
			}
			http.Error(w, "no", http.StatusForbidden)
		default:
			http.NotFound(w, r)
		}
	}))
	defer api.Close()
	// The legacy client's clock, moved past each failure's wait so that
	// every window is tried.
	var clk atomic.Int64
	clk.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clk.Load()) }
	h := start(t, options{legacy: true, apiURL: "emu", legacyAPI: api.URL, legacyNow: now})
	der = signertest.OpenSSLEncryptRSA(t, doc, h.tk.RSA.Cert)
	for i := range 2 * len(windows) {
		clk.Add(int64(legacy.FloorMax))
		var code int
		var body string
		if i%2 == 0 {
			resp, b := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "legacy certificate", nil, "")
			code, body = resp.StatusCode, b
		} else {
			code, _, body = raw(t, h.sock, "POST", "/v1/authorizations", `{"scheme":"legacy","by":"certificate"}`)
		}
		if code < 400 || strings.Contains(body, "\n") && !strings.HasSuffix(body, "}\n") {
			t.Fatalf("window %d: %d %s", i, code, body)
		}
	}
	mu.Lock()
	t.Logf("%d challenges, %d confirms, %d bytes of the document reached AuthenticateConfirm", challengesSent.Load(), confirms, leaked)
	if leaked != 0 || confirms != 0 {
		t.Fatalf("%d bytes of the document in %d confirms", leaked, confirms)
	}
	mu.Unlock()
	audit := h.audit.String()
	if n := strings.Count(audit, `"operation":"certificate_login"`); n != int(challengesSent.Load()) {
		t.Fatalf("%d certificate logins audited for %d challenges:\n%s", n, challengesSent.Load(), audit)
	}
	if !strings.Contains(audit, `"outcome":"replayed"`) || !strings.Contains(audit, `"keyTransport":"`) {
		t.Fatalf("no replayed key transport audited:\n%s", audit)
	}
	if v := h.metric(t, `signagent_certificate_logins_total{outcome="replayed"}`); v == "0" {
		t.Fatalf("replays counted: %s", v)
	}
	if v := h.metric(t, `signagent_certificate_logins_total{outcome="not_opened"}`); v != "1" {
		t.Fatalf("key transports the token was asked to open and did not: %s, want 1", v)
	}
}

// TestCertificateHeaderNotExposed: with the legacy header not exposed,
// /v1/authorizations answers 403 for a certificate identity before any
// challenge is asked for (the proxy still serves it).
func TestCertificateHeaderNotExposed(t *testing.T) {
	var challenges atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		challenges.Add(1)
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer api.Close()
	h := start(t, options{legacy: true, hideLegacy: true, apiURL: "emu", legacyAPI: api.URL})
	if code, _, body := raw(t, h.sock, "POST", "/v1/authorizations", `{"scheme":"legacy","by":"certificate"}`); code != 403 || !strings.Contains(body, "--expose-legacy-header") {
		t.Fatalf("a legacy certificate header with the header not exposed: %d %s", code, body)
	}
	if challenges.Load() != 0 {
		t.Fatal("a challenge was asked for before the 403")
	}
}
