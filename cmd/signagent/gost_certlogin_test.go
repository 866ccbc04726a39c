package main

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
)

// openSSLService stands in for the service with challenges OpenSSL's gost
// engine sealed (the emulator seals its own; a party nobody here wrote
// must be checked too): Authenticate answers the next envelope,
// AuthenticateConfirm gives a token only for that envelope's random.
type openSSLService struct {
	mu       sync.Mutex
	next     func() (der, random []byte)
	want     []byte
	confirms int
	tokens   int
}

func (s *openSSLService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case strings.HasSuffix(r.URL.Path, "/V3/Authenticate"):
		der, random := s.next()
		s.want = random
		w.Write(der)
	case strings.HasSuffix(r.URL.Path, "/V3/AuthenticateConfirm"):
		s.confirms++
		got, err := base64.StdEncoding.DecodeString(r.URL.Query().Get("token"))
		if err != nil || s.want == nil || !bytes.Equal(got, s.want) {
			w.Header().Set("X-Service-ErrorCode", "Auth.WrongToken")
			http.Error(w, "Wrong token", http.StatusUnauthorized)
			return
		}
		s.want = nil
		s.tokens++
		w.Write([]byte("openssl-sealed-" + strings.Repeat("t", 40)))
	default:
		http.NotFound(w, r)
	}
}

// Certificate login with challenges OpenSSL's gost engine sealed to the
// token's certificate (256 and 512-bit keys; content S-box TC26-Z and
// CryptoPro-A; the committed fixtures and fresh ones), opened on the GOST
// test module by the CLI (legacy token, header) and by the agent
// (/v1/authorizations).
func TestGOSTCertLoginOpenSSL(t *testing.T) {
	for _, bits := range []string{"256", "512"} {
		t.Run(bits, func(t *testing.T) {
			g := pkcs11test.NewGOSTFixture(t, bits, gosttoken.Options{})
			fixtures := [][]byte{signertest.GOSTFixture(t, "env"+bits+"-z.der"), signertest.GOSTFixture(t, "env"+bits+"-a.der")}
			plain := signertest.GOSTFixture(t, "plain"+bits+".bin")
			i := 0
			svc := &openSSLService{next: func() ([]byte, []byte) {
				// The two fixtures, then fresh envelopes of both S-boxes.
				defer func() { i++ }()
				if i < len(fixtures) {
					return fixtures[i], plain
				}
				random := make([]byte, 32)
				copy(random, []byte(strings.Repeat("fresh", 7)))
				random[0] = byte(i)
				return signertest.OpenSSLEncryptGOST(t, random, g.Cert, i%2 == 1), random
			}}
			srv := httptest.NewServer(svc)
			defer srv.Close()
			env := []string{"SIGNAGENT_PKCS11_MODULE=" + g.Module(), "SIGNAGENT_PIN_FILE=" + g.PINFile(), "SIGNAGENT_TOKEN_LABEL=" + g.Label,
				"SIGNAGENT_DEVELOPER_KEY=testClient-77aa88bb99", "SIGNAGENT_BUSINESS_URL=" + srv.URL}
			for _, args := range [][]string{{"legacy", "token", "--by", "certificate"}, {"header", "--scheme", "legacy", "--by", "certificate"},
				{"legacy", "token", "--by", "certificate"}, {"legacy", "token", "--by", "certificate"}} {
				out, err := signagent(t, env, args...).Output()
				if err != nil || !strings.Contains(string(out), "openssl-sealed-") {
					t.Fatalf("%v: %v: %s", args, err, out)
				}
			}
			// The agent: the same path through /v1/authorizations.
			dir := t.TempDir()
			sock := filepath.Join(dir, "a.sock")
			devkey := filepath.Join(dir, "devkey")
			os.WriteFile(devkey, []byte("testClient-77aa88bb99\n"), 0o600)
			a := startServe(t, signagent(t, append(env, "SIGNAGENT_API_KEY="+testAPIKey), "serve", "--listen", "unix:"+sock, "--audit-log", os.DevNull,
				"--developer-key-file", devkey, "--expose-legacy-header"), sock)
			code, body := a.do("POST", "/v1/authorizations", `{"scheme":"legacy","by":"certificate"}`)
			if code != 200 || !strings.Contains(body, "ddauth_token=openssl-sealed-") {
				t.Fatalf("agent: %d %s\n%s", code, body, a.stderr.String())
			}
			svc.mu.Lock()
			defer svc.mu.Unlock()
			if svc.confirms != 5 || svc.tokens != 5 || g.Tries(t) != 0 || g.GOSTObjects(t) != 0 {
				t.Fatalf("confirms %d, tokens %d, tries %d, session keys %d", svc.confirms, svc.tokens, g.Tries(t), g.GOSTObjects(t))
			}
		})
	}
}
