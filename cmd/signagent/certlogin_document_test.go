package main

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
	"github.com/signagent/signagent/store/storetest"
)

// TestCertificateLoginDocumentCLI: a hostile business API sends windows
// of a document sealed by OpenSSL to the GOST card's certificate as
// challenges to `signagent legacy token --by certificate` (issue 45, item
// 0), one command after another on one shared store, as a cron job or
// several hosts would run it. The first window of a challenge's length
// opens (nothing tells it from a challenge); the next, with the same key
// transport, is one clear line and exit 4, the token not asked; shorter
// and longer windows are refused before the token. At most 32 bytes of the
// 1 KiB document reach AuthenticateConfirm.
func TestCertificateLoginDocumentCLI(t *testing.T) {
	g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
	doc := make([]byte, 1024)
	rand.Read(doc)
	der := signertest.OpenSSLEncryptGOST(t, doc, g.Cert, false)
	type win struct{ off, n int }
	windows := []win{{0, 32}, {512, 32}, {0, 16}, {512, 256}}
	var mu sync.Mutex
	cur, leaked := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/V3/Authenticate":
			w.Write(signertest.EnvelopeWindow(t, der, 8, windows[cur].off, windows[cur].n))
		case "/V3/AuthenticateConfirm":
			got, _ := base64.StdEncoding.DecodeString(r.URL.Query().Get("token"))
			for i := range min(len(got), windows[cur].n) {
				if got[i] == doc[windows[cur].off+i] {
					leaked++
				}
			}
			w.Header().Set("X-Service-ErrorCode", "Auth.RndBytesNotFound")
			http.Error(w, "no challenge", http.StatusForbidden)
		}
	}))
	defer srv.Close()
	redis := storetest.Start(t)
	key := filepath.Join(t.TempDir(), "store.key")
	makeStoreKey(t, key)
	env := []string{"SIGNAGENT_PKCS11_MODULE=" + g.Module(), "SIGNAGENT_PIN_FILE=" + g.PINFile(), "SIGNAGENT_TOKEN_LABEL=" + g.Label,
		"SIGNAGENT_DEVELOPER_KEY=testClient-77aa88bb99", "SIGNAGENT_BUSINESS_URL=" + srv.URL,
		"SIGNAGENT_STORE=" + redis.URL(), "SIGNAGENT_STORE_KEY_FILE=" + key, "SIGNAGENT_LOG_LEVEL=warn"}
	want := []struct {
		code int
		line string
	}{
		{3, "AuthenticateConfirm: the service answered HTTP 403"},
		{4, "repeats a key transport this certificate's key has already opened: refused without asking the token"},
		{4, "the encrypted content is 16 bytes; a challenge's random is 32"},
		{4, "the encrypted content is 256 bytes; a challenge's random is 32"},
	}
	for i, w := range want {
		mu.Lock()
		cur = i
		mu.Unlock()
		code, stderr, _ := runBinary(t, signagent(t, env, "legacy", "token", "--by", "certificate"))
		if code != w.code || !strings.Contains(stderr, w.line) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Fatalf("window %v: exit %d, want %d and %q:\n%s", windows[i], code, w.code, w.line, stderr)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d bytes of the 1 KiB document reached AuthenticateConfirm", leaked)
	if leaked > 32 || g.Tries(t) != 0 {
		t.Fatalf("%d bytes of the document reached AuthenticateConfirm; PIN tries %d", leaked, g.Tries(t))
	}
}
