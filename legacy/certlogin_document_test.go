package legacy_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gosttoken"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer/signertest"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// A hostile or impersonated business API holds a document encrypted to
// the user's certificate (OpenSSL's cms -encrypt) and sends windows of its
// ciphertext as "challenges", each with the ciphertext block before it as
// the IV, to read the document back from AuthenticateConfirm (issue 45,
// item 0). What reaches AuthenticateConfirm of the document is at most one
// challenge's length, once: the first window of exactly a challenge's
// length, never another (its key transport was opened), whether one agent
// is asked or two sharing a store; the token is never asked for a key
// transport it has opened.

// window is one "challenge" cut from a document's envelope: len bytes of
// its ciphertext from off.
type window struct{ off, len int }

// cmsDoc is a document sealed to a certificate, its envelope as a tree,
// and where in it the content and its IV are.
type cmsDoc struct {
	plain []byte
	der   []byte
	block int // the content cipher's block (8: GOST 28147-89, 16: AES)
}

// cut is the window w of the document's envelope (signertest.EnvelopeWindow).
func (d cmsDoc) cut(t *testing.T, w window) []byte {
	return signertest.EnvelopeWindow(t, d.der, d.block, w.off, w.len)
}

// countingKey is the token's key, counting the key transports it is asked
// to open: a GOST challenge (the whole of it on the token) or an RSA
// decryption.
type countingKey struct {
	*pkcs11.Key
	opened atomic.Int32
}

func (k *countingKey) OpenGOSTContext(ctx context.Context, tr *gost.Transport) ([]byte, error) {
	k.opened.Add(1)
	return k.Key.OpenGOSTContext(ctx, tr)
}

func (k *countingKey) DecryptContext(ctx context.Context, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	k.opened.Add(1)
	return k.Key.DecryptContext(ctx, msg, opts)
}

// standIn is a hostile business API: it answers each Authenticate with
// the next window of doc and refuses every AuthenticateConfirm, counting
// the bytes of the document it was sent back.
type standIn struct {
	*httptest.Server
	mu       sync.Mutex
	doc      cmsDoc
	windows  []window
	next     int
	served   int
	leaked   int // bytes of the document that came back
	confirms int
}

func newStandIn(t *testing.T, doc cmsDoc, windows []window) *standIn {
	s := &standIn{doc: doc, windows: windows}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch r.URL.Path {
		case "/V3/Authenticate":
			if s.next >= len(s.windows) {
				http.Error(w, "no more", http.StatusServiceUnavailable)
				return
			}
			s.served = s.next
			s.next++
			w.Write(s.doc.cut(t, s.windows[s.served]))
		case "/V3/AuthenticateConfirm":
			s.confirms++
			got, _ := base64.StdEncoding.DecodeString(r.URL.Query().Get("token"))
			win := s.windows[s.served]
			for i := range min(len(got), win.len) {
				if got[i] == s.doc.plain[win.off+i] {
					s.leaked++
				}
			}
			w.Header().Set(legacy.ErrorCodeHeader, legacy.CodeRndBytesNotFound)
			http.Error(w, "no challenge", http.StatusForbidden)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// clock is a test's clock, moved on past any wait after a failure.
type clock struct{ at atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.at.Load()) }
func (c *clock) advance(d time.Duration) { c.at.Add(int64(d)) }

func windowsFor(block int) []window {
	var out []window
	lens := []int{16, 32, 256}
	if block == 16 {
		lens = append(lens, 48) // a 32-byte random and its padding block: the RSA challenge's length
	}
	for _, n := range lens {
		for _, off := range []int{0, 512} {
			out = append(out, window{off, n})
		}
	}
	return out
}

func TestCertificateLoginOpensNoDocument(t *testing.T) {
	doc := make([]byte, 1024)
	rand.Read(doc)
	type subject struct {
		name string
		cert *x509.Certificate
		key  *pkcs11.Key
		doc  cmsDoc
	}
	var subjects []subject
	for _, bits := range []int{256, 512} {
		g := pkcs11test.NewGOST(t, bits, gosttoken.Options{})
		key, err := pkcs11.Open(context.Background(), g.Selection(), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { key.Close() })
		subjects = append(subjects, subject{fmt.Sprintf("GOST %d", bits), g.Cert, key,
			cmsDoc{plain: doc, der: signertest.OpenSSLEncryptGOST(t, doc, g.Cert, false), block: 8}})
	}
	tk := pkcs11test.New(t)
	rsaKey := tk.Open(t, tk.RSA.Label)
	subjects = append(subjects, subject{"RSA", tk.RSA.Cert, rsaKey, cmsDoc{plain: doc, der: signertest.OpenSSLEncryptRSA(t, doc, tk.RSA.Cert), block: 16}})

	srv := storetest.Start(t)
	for _, s := range subjects {
		for _, agents := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s, %d agents", s.name, agents), func(t *testing.T) {
				windows := windowsFor(s.doc.block)
				api := newStandIn(t, s.doc, windows)
				key := &countingKey{Key: s.key}
				var clk clock
				clk.at.Store(time.Now().UnixNano())
				var clients []*legacy.Client
				var logins []legacy.CertLogin
				var mu sync.Mutex
				prefix := fmt.Sprintf("windows-%d:", time.Now().UnixNano()) // one store, the agents' own
				for range agents {
					c, err := legacy.New(legacy.Config{APIURL: api.URL, DeveloperKey: devKey,
						Settings: httpx.Settings{Timeout: 5 * time.Second, Backoff: time.Millisecond, Now: clk.now}, Log: zerolog.Nop()})
					if err != nil {
						t.Fatal(err)
					}
					if agents > 1 {
						sealer, _ := store.NewSealer(bytes.Repeat([]byte{byte(len(s.name))}, 32))
						sh, err := store.Open(srv.URL(), store.Options{Sealer: sealer, Prefix: prefix})
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { sh.Close() })
						legacy.NewTokens(c, 0, 0).Share(sh)
					}
					c.Guard().Observe(func(l legacy.CertLogin) { mu.Lock(); logins = append(logins, l); mu.Unlock() })
					clients = append(clients, c)
				}
				for i := range windows {
					clk.advance(legacy.FloorMax) // past any wait: the windows themselves are what is tried
					_, err := clients[i%agents].Certificate(context.Background(), s.cert, key)
					if err == nil {
						t.Fatalf("window %d: a token from a hostile API", i)
					}
				}
				t.Logf("%s, %d agent(s): %d windows served, %d confirms, %d bytes of the 1 KiB document reached AuthenticateConfirm, the token opened %d key transports",
					s.name, agents, len(windows), api.confirms, api.leaked, key.opened.Load())
				if api.leaked > envelope.ChallengeSize || key.opened.Load() > 1 {
					t.Fatalf("%d bytes of the document reached AuthenticateConfirm (at most %d may), the token opened %d key transports (at most 1)",
						api.leaked, envelope.ChallengeSize, key.opened.Load())
				}
				outcomes := map[string]int{}
				for _, l := range logins {
					outcomes[l.Outcome]++
					if (l.Transport == "") != (l.Outcome == legacy.CertNotChallenge) {
						t.Errorf("a certificate login without its key transport's hash: %+v", l)
					}
				}
				t.Logf("outcomes: %v", outcomes)
				if len(logins) != len(windows) || outcomes[legacy.CertReplayed] == 0 || outcomes[legacy.CertNotChallenge] == 0 {
					t.Errorf("certificate logins observed: %v", outcomes)
				}
			})
		}
	}
}

// After the service refuses a confirmation, the next certificate login
// for that certificate waits 1 s, doubling to 5 min; a caller whose
// deadline is nearer is answered at once, with the wait (Retry-After).
func TestCertificateLoginFloor(t *testing.T) {
	b := newBed(t, nil)
	var refuse atomic.Bool
	refuse.Store(true)
	target, _ := url.Parse(b.emu.URL())
	emu := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/V3/AuthenticateConfirm" && refuse.Load() {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		emu.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := b.newClient(t, devKey, srv.URL)
	cert, key := b.key.Certificate(), b.key
	want := time.Second
	for i := range 11 {
		_, err := c.Certificate(context.Background(), cert, key)
		var se *legacy.ServiceError
		if !errors.As(err, &se) {
			t.Fatalf("login %d: want the service's refusal, got %v", i, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = c.Certificate(ctx, cert, key)
		cancel()
		var be *legacy.BackoffError
		if !errors.As(err, &be) || be.RetryAfter() != want {
			t.Fatalf("after %d refusals: want a wait of %s, got %v", i+1, want, err)
		}
		b.advance(want)
		want = min(2*want, legacy.FloorMax)
	}
	if want != legacy.FloorMax {
		t.Fatalf("the wait did not reach its bound: %s", want)
	}
	refuse.Store(false)
	if _, err := c.Certificate(context.Background(), cert, key); err != nil {
		t.Fatalf("a login after the wait: %v", err)
	}
	_, err := c.Certificate(context.Background(), cert, key)
	if err != nil {
		t.Fatalf("a login after a success waits for nothing: %v", err)
	}
}

// The same GOST wrapped content key sent again with another ephemeral key
// (as a point plus one of small order would be, on a curve with a
// cofactor: VKO multiplies it away and the token would unwrap it) is the
// same key transport: refused as a replay without asking the token.
func TestCertificateLoginSameWrapOtherEphemeral(t *testing.T) {
	g := pkcs11test.NewGOST(t, 256, gosttoken.Options{})
	pk, err := pkcs11.Open(context.Background(), g.Selection(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer pk.Close()
	key := &countingKey{Key: pk}
	random := make([]byte, envelope.ChallengeSize)
	rand.Read(random)
	first := signertest.OpenSSLEncryptGOST(t, random, g.Cert, false)
	e := readGOSTEnv(t, first)
	e.kt.Kids[1].Kids[1] = readGOSTEnv(t, signertest.OpenSSLEncryptGOST(t, random, g.Cert, false)).ephemeral()
	answers := [][]byte{first, e.der()}
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/V3/AuthenticateConfirm" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		w.Write(answers[0])
		answers = answers[1:]
	}))
	defer srv.Close()
	var clk clock
	clk.at.Store(time.Now().UnixNano())
	c, err := legacy.New(legacy.Config{APIURL: srv.URL, DeveloperKey: devKey,
		Settings: httpx.Settings{Timeout: 5 * time.Second, Backoff: time.Millisecond, Now: clk.now}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	c.Guard().Observe(func(l legacy.CertLogin) { outcomes = append(outcomes, l.Outcome) })
	for range 2 {
		clk.advance(legacy.FloorMax)
		c.Certificate(context.Background(), g.Cert, key)
	}
	if key.opened.Load() != 1 || len(outcomes) != 2 || outcomes[1] != legacy.CertReplayed {
		t.Fatalf("the token opened %d key transports (want 1); outcomes %v (want the second replayed)", key.opened.Load(), outcomes)
	}
}
