package legacy_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/pkcs11/softhsm"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/signer/signertest"
	"github.com/signagent/signagent/trusted"
)

const (
	devKey   = "api-3f2a0c1e-5b7d-4e8f-9a01-23456789abcd"
	apiKey   = "0F6C2E5B-9D4A-4C1E-8A2B-7E3D1F0A9B8C"
	password = "correct horse battery"
	boxGUID  = "3f2a0c1e-5b7d-4e8f-9a01-23456789abcd"
)

// bed is a SoftHSM token whose RSA key may decrypt (and one that may not),
// the in-process emulator knowing its certificate, and a client.
type bed struct {
	tk     *pkcs11test.Token
	key    *pkcs11.Key
	emu    *emulator.Server
	client *legacy.Client
	logs   *pkcs11test.LogBuffer
	now    atomic.Pointer[time.Time]
}

// bedTimeout bounds each of the bed's requests: generous, because the
// emulator checks passwords with bcrypt, which under the race detector on
// a loaded two-core machine took over 5 s (TestServiceFailing and
// TestRefusedTwice timed out in CI and logged in again).
const bedTimeout = 30 * time.Second

func newBed(t testing.TB, edit func(*emulator.Config)) *bed {
	t.Helper()
	tk := pkcs11test.NewWith(t, pkcs11test.Options{Extra: []softhsm.KeySpec{{Type: softhsm.RSA2048, Label: "sign-only", ID: []byte{9}, NoDecrypt: true}}})
	key := tk.Open(t, tk.RSA.Label)
	// The cheapest bcrypt cost: the emulator checks the password at every
	// sign-in, and at the default cost that took seconds of CPU under -race.
	hashBytes, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	hash := string(hashBytes)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &emulator.Config{
		Partners:   []emulator.Partner{{Name: "crm", APIKey: apiKey, Certificates: []string{string(signertest.PEM(tk.RSA.Cert))}}},
		Developers: []emulator.Developer{{Name: "crm", Key: devKey}},
		Organizations: []emulator.Organization{{ID: "org-1", Inn: "6663003127", FullName: "Horns and Hooves LLC",
			Boxes: []emulator.Box{{GUID: boxGUID, Title: "main"}}}},
		Users: []emulator.User{{ID: "u1", SNILS: "11223344595", Login: "alice@example.com", PasswordHash: hash,
			Thumbprints: []string{canonical.ThumbprintOf(key.Certificate())}, Linked: []string{"crm:crm-42"}, Boxes: []string{boxGUID}}},
	}
	if edit != nil {
		edit(cfg)
	}
	b := &bed{tk: tk, key: key, logs: &pkcs11test.LogBuffer{}}
	now := time.Now()
	b.now.Store(&now)
	b.emu = emulatortest.NewWith(t, cfg, emulatortest.Options{Log: b.logs, Now: func() time.Time { return *b.now.Load() }}).Server
	b.client = b.newClient(t, devKey, b.emu.URL())
	return b
}

func (b *bed) advance(d time.Duration) {
	n := b.now.Load().Add(d)
	b.now.Store(&n)
}

func (b *bed) newClient(t testing.TB, key, url string) *legacy.Client {
	t.Helper()
	c, err := legacy.New(legacy.Config{APIURL: url, DeveloperKey: key, Settings: httpx.Settings{Timeout: bedTimeout, Backoff: time.Millisecond, Now: func() time.Time { return *b.now.Load() }}, Log: zerolog.New(b.logs)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// noSecrets fails when a secret shows in the error or the logs.
func (b *bed) noSecrets(t *testing.T, err error, secrets ...string) {
	t.Helper()
	for _, s := range append(secrets, devKey, password) {
		if err != nil && strings.Contains(err.Error(), s) {
			t.Fatalf("error shows a secret: %v", err)
		}
		if strings.Contains(b.logs.String(), s) {
			t.Fatalf("log shows a secret:\n%s", b.logs.String())
		}
	}
}

func TestThreeWaysIn(t *testing.T) {
	b := newBed(t, nil)
	ctx := context.Background()
	byPassword, err := b.client.Password(ctx, "alice@example.com", password)
	if err != nil {
		t.Fatal(err)
	}
	byCert, err := b.client.Certificate(ctx, b.key.Certificate(), b.key)
	if err != nil {
		t.Fatal(err)
	}
	// The sid of a real trusted flow, signed on the token.
	tc, err := trusted.New(trusted.Config{BaseURL: b.emu.URL(), APIKey: apiKey, Signer: &signer.CMS{Key: b.key, Cert: b.key.Certificate()}})
	if err != nil {
		t.Fatal(err)
	}
	snils, _ := canonical.ParseSNILS("11223344595", canonical.Options{})
	sess, err := tc.Session(ctx, snils, "crm-42")
	if err != nil {
		t.Fatal(err)
	}
	bySid, err := b.client.Sid(ctx, sess.Sid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []legacy.Token{byPassword, byCert, bySid} {
		if len(tok.Value) != 172 || !tok.ExpiresAt.Equal(tok.ObtainedAt.Add(24*time.Hour)) {
			t.Fatalf("%s: %q expires %v", tok.By, tok.Value, tok.ExpiresAt)
		}
		if st := b.organizations(t, b.client.Header(tok.Value)); st != 200 {
			t.Fatalf("%s: GetMyOrganizations answered %d", tok.By, st)
		}
	}
	b.noSecrets(t, nil, byPassword.Value, byCert.Value, bySid.Value, sess.Sid)
}

func (b *bed) organizations(t *testing.T, header string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.emu.URL()+"/GetMyOrganizations?autoRegister=false", nil)
	req.Header.Set("Authorization", header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestCertificateLoginOAEP(t *testing.T) {
	b := newBed(t, func(c *emulator.Config) { c.OAEP = true })
	if _, err := b.client.Certificate(context.Background(), b.key.Certificate(), b.key); err != nil {
		t.Fatal(err)
	}
}

func serviceErr(t *testing.T, err error, status int, code string) *legacy.ServiceError {
	t.Helper()
	var se *legacy.ServiceError
	if !errors.As(err, &se) || se.Status != status || se.Code != code {
		t.Fatalf("want HTTP %d %s, got %v", status, code, err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error is more than one line: %q", err)
	}
	return se
}

func TestRefusals(t *testing.T) {
	b := newBed(t, nil)
	ctx := context.Background()

	_, err := b.newClient(t, "api-not-known", b.emu.URL()).Password(ctx, "alice@example.com", password)
	serviceErr(t, err, 401, legacy.CodeAuth)
	if !strings.Contains(err.Error(), "developer key is missing or wrong") {
		t.Fatalf("no hint: %v", err)
	}
	_, err = b.client.Password(ctx, "alice@example.com", "wrong password")
	serviceErr(t, err, 401, emulator.CodeWrongPassword)
	b.noSecrets(t, err, "wrong password")

	_, err = b.client.Sid(ctx, "no-such-sid")
	serviceErr(t, err, 401, emulator.CodeInvalidSid)
	b.noSecrets(t, err, "no-such-sid")

	// An unknown certificate: another key on the token, not registered.
	other := b.tk.Open(t, b.tk.EC.Label)
	_, err = b.client.Certificate(ctx, b.key.Certificate(), other)
	if !errors.Is(err, tokenerr.ErrKeyUsage) {
		t.Fatalf("an EC key: %v", err)
	}
	signOnly := b.tk.Open(t, "sign-only")
	if _, err = b.client.Certificate(ctx, signOnly.Certificate(), signOnly); !errors.Is(err, tokenerr.ErrKeyUsage) || !strings.Contains(err.Error(), "CKA_DECRYPT") {
		t.Fatalf("a key that may not decrypt: %v", err)
	}
	if n := b.emu.Stats().Requests["Authenticate"]; n != 3 {
		t.Fatalf("the service was asked %d times; keys that cannot decrypt must not ask it", n)
	}
	// A registered certificate, on a token key that may decrypt but is not
	// that certificate's: the envelope is not for it.
	unknown := selfSigned(t)
	_, err = b.client.Certificate(ctx, unknown.cert, unknown.key)
	serviceErr(t, err, 401, emulator.CodeUnknownCert)

	// An expired sid.
	tc, _ := trusted.New(trusted.Config{BaseURL: b.emu.URL(), APIKey: apiKey, Signer: &signer.CMS{Key: b.key, Cert: b.key.Certificate()}})
	snils, _ := canonical.ParseSNILS("11223344595", canonical.Options{})
	sess, err := tc.Session(ctx, snils, "crm-42")
	if err != nil {
		t.Fatal(err)
	}
	b.advance(25 * time.Hour)
	_, err = b.client.Sid(ctx, sess.Sid)
	serviceErr(t, err, 401, emulator.CodeInvalidSid)
	b.noSecrets(t, err, sess.Sid)
}

type soft struct {
	cert *x509.Certificate
	key  *rsa.PrivateKey
}

// selfSigned is a certificate the emulator does not know, with its key in
// memory: it stands for a stranger's card in a test of the service's refusal.
func selfSigned(t *testing.T) soft {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "stranger"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	cert, _ := x509.ParseCertificate(der)
	return soft{cert, key}
}

// TestBadEnvelopes points the client at a stand-in service that answers
// the certificate login with envelopes the emulator would never send (a
// fake, because that is what it cannot be made to do): each is one clear
// error, AuthenticateConfirm is never called, and nothing of what the
// envelope holds is in the error. Those that only the token can give away
// (a key transport that does not decrypt, content that is not a random of
// the challenge's length under the same ciphertext length) have one and
// the same error; and the token still logs in afterwards.
func TestBadEnvelopes(t *testing.T) {
	b := newBed(t, nil)
	cert := b.key.Certificate()
	good, _ := envelope.Seal([]byte("random"), cert, false)
	stranger := selfSigned(t)
	toOther, _ := envelope.Seal([]byte("random"), stranger.cert, false)
	doc := []byte("CONFIDENTIAL: the board meets on Friday; the merger price is 41 per share. Tell nobody.")
	document, _ := envelope.Seal(doc, cert, false)
	both, _ := envelope.Seal(make([]byte, envelope.ChallengeSize), cert, false)
	// 33 bytes: 48 bytes encrypted, as a challenge's 32 are.
	long, _ := envelope.Seal(append([]byte(strings.Repeat("S", 32)), '!'), cert, false)
	// A challenge whose RSA block is damaged: the token's key transport fails.
	damaged, _ := envelope.Seal(make([]byte, envelope.ChallengeSize), cert, false)
	i := strings.Index(string(damaged), "\x04\x82\x01\x00") + 4
	if i < 4 {
		t.Fatal("no 256-byte encrypted key in the envelope")
	}
	damaged[i+100] ^= 0x5a
	for name, tc := range map[string]struct {
		body []byte
		want error
	}{
		"truncated":           {good[:len(good)/2], envelope.ErrMalformed},
		"not DER":             {[]byte("-----BEGIN PKCS7-----\nMIIB\n-----END PKCS7-----\n"), envelope.ErrMalformed},
		"empty":               {nil, envelope.ErrMalformed},
		"not for us":          {toOther, envelope.ErrNotForUs},
		"6 bytes":             {good, envelope.ErrNotChallenge},
		"an 87-byte document": {document, envelope.ErrNotChallenge},
		"33 bytes":            {long, envelope.ErrChallenge},
		"damaged key":         {damaged, envelope.ErrChallenge},
		"well-formed":         {both, nil},
	} {
		t.Run(name, func(t *testing.T) {
			var confirms atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "AuthenticateConfirm") {
					confirms.Add(1)
					http.Error(w, "no", http.StatusForbidden)
					return
				}
				w.Write(tc.body)
			}))
			defer srv.Close()
			_, err := b.newClient(t, devKey, srv.URL).Certificate(context.Background(), cert, b.key)
			if tc.want == nil { // the stand-in takes nothing back: the 403 shows the random was sent
				if confirms.Load() != 1 || err == nil {
					t.Fatalf("a challenge was not answered: %v (%d confirms)", err, confirms.Load())
				}
				return
			}
			if !errors.Is(err, tc.want) || strings.Contains(err.Error(), "\n") || confirms.Load() != 0 ||
				strings.Contains(err.Error(), "CONFIDENTIAL") || strings.Contains(err.Error(), "SSSS") {
				t.Fatalf("want %v, got %v (%d confirms)", tc.want, err, confirms.Load())
			}
			if tc.want == envelope.ErrChallenge && err.Error() != "Authenticate (V3) type=certificate: the service's challenge: "+envelope.ErrChallenge.Error() {
				t.Fatalf("not the one error: %v", err)
			}
		})
	}
	if _, err := b.client.Certificate(context.Background(), cert, b.key); err != nil {
		t.Fatalf("the token no longer logs in: %v", err)
	}
}

// TestServiceFailing: 5xx is tried again and then reported as the
// service's failure; a service that does not answer is a transport error.
func TestServiceFailing(t *testing.T) {
	b := newBed(t, nil)
	b.emu.InjectFaults("Authenticate", emulator.Fault{Status: 503})
	if _, err := b.client.Password(context.Background(), "alice@example.com", password); err != nil {
		t.Fatalf("one 503 then success: %v", err)
	}
	// 429 with Retry-After is waited out and tried again; a Retry-After
	// longer than the caller's deadline ends the attempts at once.
	b.emu.InjectFaults("Authenticate", emulator.Fault{Status: 429, RetryAfter: "1"})
	before := b.emu.Stats().Requests["Authenticate"]
	if _, err := b.client.Password(context.Background(), "alice@example.com", password); err != nil {
		t.Fatalf("one 429 then success: %v", err)
	}
	if n := b.emu.Stats().Requests["Authenticate"] - before; n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
	b.emu.InjectFaults("Authenticate", emulator.Fault{Status: 429, RetryAfter: "60"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := b.client.Password(ctx, "alice@example.com", password)
	cancel()
	if se := serviceErr(t, err, 429, emulator.CodeInternal); !se.Temporary() || se.RetryAfter != time.Minute || !errors.Is(err, httpx.ErrNoTimeLeft) {
		t.Fatalf("429 asking for a minute under a 5s deadline: %v", err)
	}
	b.emu.InjectFaults("Authenticate", emulator.Fault{Status: 500}, emulator.Fault{Status: 500}, emulator.Fault{Status: 500})
	_, err = b.client.Password(context.Background(), "alice@example.com", password)
	if se := serviceErr(t, err, 500, emulator.CodeInternal); !se.Temporary() {
		t.Fatal("5xx not temporary")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(502)
		w.Write([]byte("<html><body>Bad gateway " + devKey + "</body></html>"))
	}))
	defer srv.Close()
	_, err = b.newClient(t, devKey, srv.URL).Password(context.Background(), "alice@example.com", password)
	if err == nil || strings.Contains(err.Error(), devKey) || !strings.Contains(err.Error(), "HTML page") {
		t.Fatalf("HTML answer: %v", err)
	}
	srv.Close()
	_, err = b.newClient(t, devKey, srv.URL).Password(context.Background(), "alice@example.com", password)
	var te *httpx.TransportError
	if !errors.As(err, &te) {
		t.Fatalf("closed server: %v", err)
	}
}

func TestTokensCacheSingleFlight(t *testing.T) {
	b := newBed(t, nil)
	tokens := legacy.NewTokens(b.client, 0, 0)
	id := legacy.Identity{By: legacy.ByCertificate, Subject: canonical.ThumbprintOf(b.key.Certificate()), Certificate: b.key.Certificate(), Key: b.key}
	var wg sync.WaitGroup
	got := make([]string, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, _, err := tokens.Token(context.Background(), id)
			if err != nil {
				t.Error(err)
			}
			got[i] = tok.Value
		}()
	}
	wg.Wait()
	for _, v := range got {
		if v != got[0] {
			t.Fatal("callers got different tokens")
		}
	}
	if n := b.emu.Stats().LegacyTokens; n != 1 {
		t.Fatalf("16 callers at once made %d logins", n)
	}
	// Reused until the margin before 24h, then obtained anew.
	b.advance(23*time.Hour + 49*time.Minute)
	if _, cached, _ := tokens.Token(context.Background(), id); !cached {
		t.Fatal("not reused at 23h49m")
	}
	b.advance(2 * time.Minute)
	if _, cached, _ := tokens.Token(context.Background(), id); cached {
		t.Fatal("reused inside the 10-minute margin")
	}
}

// TestExpiredTokenOnBusinessCall: the emulator's tokens live 2 seconds of
// its clock; the client believes 24 hours. A business call with the cached
// token gets a 401, drops it, authenticates once more and succeeds; when
// the service refuses the new token too, the error says who was refused.
func TestExpiredTokenOnBusinessCall(t *testing.T) {
	b := newBed(t, func(c *emulator.Config) { c.TokenTTL = emulator.Duration(2 * time.Second) })
	tokens := legacy.NewTokens(b.client, 0, 0)
	a := tokens.For(legacy.Identity{By: legacy.ByPassword, Subject: "alice@example.com", Password: password})
	call := func() (*http.Response, error) {
		return authz.Do(context.Background(), a, func(ctx context.Context, h string) (*http.Response, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.emu.URL()+"/GetMyOrganizations?autoRegister=false", nil)
			req.Header.Set("Authorization", h)
			return http.DefaultClient.Do(req)
		})
	}
	for i, advance := range []time.Duration{0, 0, 3 * time.Second} {
		b.advance(advance)
		resp, err := call()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("call %d: %v", i, err)
		}
		resp.Body.Close()
	}
	if n := b.emu.Stats().LegacyTokens; n != 2 {
		t.Fatalf("%d logins; want 2 (first, and after the expiry)", n)
	}
}

// TestRefusedTwice: tokens dead on arrival are refused twice, then a clear
// error, after exactly one more login.
func TestRefusedTwice(t *testing.T) {
	b2 := newBed(t, func(c *emulator.Config) { c.TokenTTL = emulator.Duration(time.Nanosecond) })
	b2.emu.SetClock(time.Now) // a running clock: the tokens are dead before they are used
	a2 := legacy.NewTokens(b2.client, 0, 0).For(legacy.Identity{By: legacy.ByPassword, Subject: "alice@example.com", Password: password})
	_, err := authz.Do(context.Background(), a2, func(ctx context.Context, h string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b2.emu.URL()+"/GetMyOrganizations?autoRegister=false", nil)
		req.Header.Set("Authorization", h)
		return http.DefaultClient.Do(req)
	})
	var re *authz.RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "password alice@example.com") || strings.Contains(err.Error(), devKey) {
		t.Fatalf("want a refusal naming the identity, got %v", err)
	}
	if n := b2.emu.Stats().LegacyTokens; n != 2 {
		t.Fatalf("%d logins; want exactly one more after the first 401", n)
	}
}

func TestConfigRefusals(t *testing.T) {
	for name, cfg := range map[string]legacy.Config{
		"no URL":           {DeveloperKey: devKey},
		"http to a host":   {APIURL: "http://service.example", DeveloperKey: devKey},
		"user info":        {APIURL: "https://u:p@service.example", DeveloperKey: devKey},
		"no key":           {APIURL: "https://service.example"},
		"key with a comma": {APIURL: "https://service.example", DeveloperKey: "a,b"},
		"key with a space": {APIURL: "https://service.example", DeveloperKey: "a b"},
	} {
		_, err := legacy.New(cfg)
		if err == nil || strings.Contains(err.Error(), "a,b") || strings.Contains(err.Error(), "a b") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := legacy.New(legacy.Config{APIURL: "http://127.0.0.1:1", DeveloperKey: devKey + "\n"}); err != nil {
		t.Errorf("loopback http with a key file's newline: %v", err)
	}
}
