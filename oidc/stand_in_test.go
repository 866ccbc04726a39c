package oidc

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"

	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func newHTMLServer(t *testing.T) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<!doctype html><html><body>Welcome to the hotel network</body></html>"))
	}))
	t.Cleanup(s.Close)
	return s.URL
}

func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// fakeIDP is a stand-in provider whose token endpoint returns an id_token
// the test chooses: the emulator always issues good ones, and these tests
// are about the client refusing bad ones.
type fakeIDP struct {
	url       string
	published *rsa.PrivateKey
	claims    func(nonce string) map[string]any
	signer    *rsa.PrivateKey // nil: the published key
	// endlessJWKS makes the key set an answer that does not end (up to
	// 64 MiB, so that a client without a limit fails the test rather than
	// hanging it); jwksBytes counts what the client took of it.
	endlessJWKS bool
	jwksBytes   atomic.Int64
	// device is the device authorization answer; every device_code poll
	// is counted in devicePolls and answered authorization_pending.
	mu          sync.Mutex
	device      map[string]any // under mu
	devicePolls atomic.Int64
	// answers stand in for the usual answer of a path, each used once,
	// first set first (under mu).
	answers map[string][]http.HandlerFunc
	stop    chan struct{} // closed when the test ends: trickles stop
}

// answerOnce makes the next request for path answered by h.
func (f *fakeIDP) answerOnce(path string, h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[path] = append(f.answers[path], h)
}

func (f *fakeIDP) next(path string) http.HandlerFunc {
	f.mu.Lock()
	defer f.mu.Unlock()
	hs := f.answers[path]
	if len(hs) == 0 {
		return nil
	}
	f.answers[path] = hs[1:]
	return hs[0]
}

// trickle is an answer that starts as JSON and then sends a space every
// 50 ms until the client goes away (or the test ends): its head comes at
// once, its body never ends. ended is closed when the client went away.
func (f *fakeIDP) trickle(ended chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"keys":[`))
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-f.stop:
				return
			case <-tick.C:
				w.Write([]byte(" "))
			}
		}
	}
}

// sized is a 200 answer of exactly n bytes: the JSON doc padded with
// spaces.
func sized(doc map[string]any, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, _ := json.Marshal(doc)
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, strings.Repeat(" ", n-len(b))...))
	}
}

func newFakeIDP(t *testing.T) *fakeIDP {
	t.Helper()
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	f := &fakeIDP{published: key, answers: map[string][]http.HandlerFunc{}, stop: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": f.url, "authorization_endpoint": f.url + "/connect/authorize",
			"token_endpoint": f.url + "/connect/token", "jwks_uri": f.url + "/jwks", "device_authorization_endpoint": f.url + "/connect/deviceauthorization"})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		if f.endlessJWKS {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"keys":[`))
			chunk := []byte(strings.Repeat(`{"kty":"oct","k":"AAAA"},`, 1000))
			for f.jwksBytes.Load() < 64<<20 {
				n, err := w.Write(chunk)
				f.jwksBytes.Add(int64(n))
				if err != nil {
					return
				}
			}
			return
		}
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /connect/deviceauthorization", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		f.mu.Lock()
		defer f.mu.Unlock()
		json.NewEncoder(w).Encode(f.device)
	})
	mux.HandleFunc("POST /connect/token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		if r.Form.Get("grant_type") == "urn:ietf:params:oauth:grant-type:device_code" {
			f.devicePolls.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"authorization_pending"}`))
			return
		}
		signWith := f.published
		if f.signer != nil {
			signWith = f.signer
		}
		sig, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: signWith}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
		payload, _ := json.Marshal(f.claims(r.Form.Get("nonce")))
		obj, _ := sig.Sign(payload)
		idt, _ := obj.CompactSerialize()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": strings.Repeat("a", 64), "token_type": "Bearer",
			"expires_in": 3600, "refresh_token": "rt", "id_token": idt})
	})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := f.next(r.URL.Path); h != nil {
			h(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(f.stop) }) // before Close, which waits for the handlers
	f.url = s.URL
	return f
}

func (f *fakeIDP) setDevice(m map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.device = m
}
