package trusted_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/signer/signertest"
	"github.com/signagent/signagent/trusted"
)

const (
	apiKey      = "0F6C2E5B-9D4A-4C1E-8A2B-7E3D1F0A9B8C"
	otherAPIKey = "11111111-2222-3333-4444-555555555555"
	userPhone   = "9161234567"
	userSNILS   = "11223344595"
	adminPhone  = "9990000000"
	sharedPhone = "9035550000"
	serviceUser = "crm-user-42"
)

// env is one SoftHSM token, the in-process emulator and a client.
type env struct {
	tk     *pkcs11test.Token
	key    *pkcs11.Key
	emu    *emulator.Server
	client *trusted.Client
	logs   *pkcs11test.LogBuffer
	thumb  string
}

func newEnv(t *testing.T, edit func(*trusted.Config)) *env { return newBenchEnv(t, edit) }

// newBenchEnv is newEnv for tests and benchmarks alike.
func newBenchEnv(t testing.TB, edit func(*trusted.Config)) *env {
	t.Helper()
	tk := pkcs11test.New(t)
	key := tk.Open(t, tk.RSA.Label)
	thumb := canonical.ThumbprintOf(key.Certificate())
	cfg := &emulator.Config{
		Partners: []emulator.Partner{
			{Name: "partner", APIKey: apiKey, Certificates: []string{string(signertest.PEM(tk.RSA.Cert))}, CanLinkByPhone: true},
			{Name: "no-link", APIKey: otherAPIKey, Certificates: []string{string(signertest.PEM(tk.RSA.Cert))}},
		},
		Users: []emulator.User{
			{ID: "u1", Phone: userPhone, SNILS: userSNILS, Thumbprints: []string{thumb}},
			{ID: "admin", Phone: adminPhone, Admin: true},
			{ID: "twin1", Phone: sharedPhone},
			{ID: "twin2", Phone: sharedPhone},
			{ID: "u2", Phone: "9160000002", Linked: []string{"partner:taken"}},
		},
	}
	logs := &pkcs11test.LogBuffer{}
	emu := emulatortest.NewWith(t, cfg, emulatortest.Options{Log: logs}).Server
	e := &env{tk: tk, key: key, emu: emu, logs: logs, thumb: thumb}
	e.client = e.newClient(t, edit)
	return e
}

func (e *env) newClient(t testing.TB, edit func(*trusted.Config)) *trusted.Client {
	t.Helper()
	tc := trusted.Config{
		BaseURL: e.emu.URL(), APIKey: apiKey,
		Signer:   &signer.CMS{Key: e.key, Cert: e.key.Certificate()},
		Settings: httpx.Settings{Timeout: 5 * time.Second, Backoff: 5 * time.Millisecond, UserAgent: "signagent/test"},
		Log:      zerolog.New(e.logs),
	}
	if edit != nil {
		edit(&tc)
	}
	c, err := trusted.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// linked links the sample user and returns the phone credential it is
// known by.
func (e *env) linked(t testing.TB) canonical.Credential {
	t.Helper()
	cred := canonical.Credential{Kind: canonical.Phone, Value: userPhone}
	if err := e.client.Link(context.Background(), serviceUser, cred); err != nil {
		t.Fatal(err)
	}
	return cred
}

func phone(t *testing.T, s string) canonical.Credential {
	c, err := canonical.ParsePhone(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSessionEachKind links the user by phone and obtains an auth.sid with
// each kind of credential.
func TestSessionEachKind(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if err := e.client.Link(ctx, serviceUser, phone(t, userPhone)); err != nil {
		t.Fatal(err)
	}
	var sids []string
	for _, cred := range []canonical.Credential{
		{Kind: canonical.Phone, Value: userPhone},
		{Kind: canonical.SNILS, Value: userSNILS},
		{Kind: canonical.Thumbprint, Value: e.thumb},
	} {
		t.Run(cred.Kind.String(), func(t *testing.T) {
			s, err := e.client.Session(ctx, cred, serviceUser)
			if err != nil {
				t.Fatal(err)
			}
			rec, ok := e.emu.LookupSid(s.Sid)
			if !ok || rec.UserID != "u1" || rec.ServiceUserID != serviceUser {
				t.Fatalf("sid not issued for u1: %+v %v", rec, ok)
			}
			if s.Kind != cred.Kind || time.Since(s.ObtainedAt) > time.Minute {
				t.Fatalf("session %+v", s)
			}
			sids = append(sids, s.Sid)
		})
	}
	assertNoSecrets(t, e.logs.String(), sids...)
}

// TestServiceCodes provokes every error of section 7.3 with real requests.
func TestServiceCodes(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if err := e.client.Link(ctx, serviceUser, phone(t, userPhone)); err != nil {
		t.Fatal(err)
	}
	wrongKey := e.newClient(t, func(c *trusted.Config) { c.APIKey = "99999999-0000-0000-0000-000000000000" })
	noLink := e.newClient(t, func(c *trusted.Config) { c.APIKey = otherAPIKey })
	userCred := canonical.Credential{Kind: canonical.Phone, Value: userPhone}

	for _, tc := range []struct {
		name   string
		call   func() error
		step   trusted.Step
		status int
		code   string
	}{
		{"link unknown key", func() error { return wrongKey.Link(ctx, "x", phone(t, userPhone)) }, trusted.StepLink, 403, trusted.CodeInvalidAPIKey},
		{"link without permission", func() error { return noLink.Link(ctx, "x", phone(t, userPhone)) }, trusted.StepLink, 403, trusted.CodeInvalidAPIKey},
		{"link unknown user", func() error { return e.client.Link(ctx, "x", phone(t, "9160000099")) }, trusted.StepLink, 403, trusted.CodeUserNotFound},
		{"link ambiguous user", func() error { return e.client.Link(ctx, "x", phone(t, sharedPhone)) }, trusted.StepLink, 403, trusted.CodeUserNotUniq},
		{"link administrator", func() error { return e.client.Link(ctx, "x", phone(t, adminPhone)) }, trusted.StepLink, 403, trusted.CodeForbiddenForTargetUser},
		{"link id taken", func() error { return e.client.Link(ctx, "taken", phone(t, userPhone)) }, trusted.StepLink, 403, trusted.CodeUnknownError},
		{"authenticate unknown key", func() error { _, err := wrongKey.Authenticate(ctx, userCred, serviceUser); return err }, trusted.StepAuthenticate, 403, trusted.CodeInvalidAPIKey},
		{"authenticate unknown user", func() error {
			_, err := e.client.Authenticate(ctx, canonical.Credential{Kind: canonical.Phone, Value: "9160000099"}, serviceUser)
			return err
		}, trusted.StepAuthenticate, 403, trusted.CodeUserNotFound},
		{"authenticate not linked", func() error { _, err := e.client.Authenticate(ctx, userCred, "someone-else"); return err }, trusted.StepAuthenticate, 403, trusted.CodeUserNotFound},
		{"authenticate administrator", func() error {
			_, err := e.client.Authenticate(ctx, canonical.Credential{Kind: canonical.Phone, Value: adminPhone}, serviceUser)
			return err
		}, trusted.StepAuthenticate, 403, trusted.CodeForbiddenForTargetUser},
		{"approve unknown key", func() error { _, err := e.client.Approve(ctx, "00FF", userCred); return err }, trusted.StepApprove, 400, emulator.CodeInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var se *trusted.ServiceError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a ServiceError", err)
			}
			if se.Step != tc.step || se.Status != tc.status || se.Code != tc.code {
				t.Fatalf("got %s %d %q, want %s %d %q", se.Step, se.Status, se.Code, tc.step, tc.status, tc.code)
			}
			msg := err.Error()
			if !strings.Contains(msg, string(tc.step)) || !strings.Contains(msg, tc.code) {
				t.Fatalf("message %q names neither step nor code", msg)
			}
			if x := trusted.Explain(tc.code); x != "" && !strings.Contains(msg, x) {
				t.Fatalf("message %q lacks the explanation", msg)
			}
			assertNoSecrets(t, msg)
		})
	}
}

// TestRawRequests covers what the client refuses to send: missing
// parameters, a missing API key, an empty serviceUserId.
func TestRawRequests(t *testing.T) {
	e := newEnv(t, nil)
	base := e.emu.URL() + "/auth/v5.16/"
	for _, tc := range []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"link missing phone", "PUT", "register-external-service-id?api-key=" + apiKey + "&serviceUserId=x", 400, emulator.CodeMissingParameter},
		{"link no api key", "PUT", "register-external-service-id?serviceUserId=x&phone=" + userPhone, 401, trusted.CodeInvalidAPIKey},
		{"link empty serviceUserId", "PUT", "register-external-service-id?api-key=" + apiKey + "&serviceUserId=&phone=" + userPhone, 403, trusted.CodeNotID},
		{"authenticate no api key", "POST", "authenticate-by-truster?phone=" + userPhone + "&timestamp=x&serviceUserId=x", 401, trusted.CodeInvalidAPIKey},
		{"authenticate missing timestamp", "POST", "authenticate-by-truster?apiKey=" + apiKey + "&phone=" + userPhone + "&serviceUserId=x", 400, emulator.CodeMissingParameter},
		{"authenticate bad timestamp", "POST", "authenticate-by-truster?apiKey=" + apiKey + "&phone=" + userPhone + "&timestamp=1.2.2024%203:04:05&serviceUserId=x", 400, emulator.CodeInvalidTimestamp},
		{"authenticate two credentials", "POST", "authenticate-by-truster?apiKey=" + apiKey + "&phone=" + userPhone + "&snils=" + userSNILS + "&timestamp=x&serviceUserId=x", 400, emulator.CodeMissingParameter},
		{"approve no api key", "POST", "approve-truster?key=AA&id=" + userPhone, 401, trusted.CodeInvalidAPIKey},
		{"approve missing key", "POST", "approve-truster?apiKey=" + apiKey + "&id=" + userPhone, 400, emulator.CodeMissingParameter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, base+tc.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || trusted.ParseErrorCode(body) != tc.code {
				t.Fatalf("got %d %s, want %d %s", resp.StatusCode, body, tc.status, tc.code)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json;charset=UTF-8" {
				t.Fatalf("content type %q", ct)
			}
		})
	}
}

func TestKeyIsSingleUseAndExpires(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	cred := e.linked(t)
	ch, err := e.client.Authenticate(ctx, cred, serviceUser)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ch.Link.Href, "approve-truster?id="+userPhone+"&key="+ch.Key) || ch.Link.Rel == "" {
		t.Fatalf("link %+v", ch.Link)
	}
	// Bound to the credential: another id spends the Key without a session.
	if _, err := e.client.Approve(ctx, ch.Key, canonical.Credential{Kind: canonical.SNILS, Value: userSNILS}); !isCode(err, emulator.CodeInvalidKey) {
		t.Fatalf("approve with another credential: %v", err)
	}
	ch, _ = e.client.Authenticate(ctx, cred, serviceUser)
	if _, err := e.client.Approve(ctx, ch.Key, cred); err != nil {
		t.Fatal(err)
	}
	// Replayed.
	if _, err := e.client.Approve(ctx, ch.Key, cred); !isCode(err, emulator.CodeInvalidKey) {
		t.Fatalf("replayed key: %v", err)
	}
	// Expired.
	ch, _ = e.client.Authenticate(ctx, cred, serviceUser)
	e.emu.SetClock(func() time.Time { return time.Now().Add(6 * time.Minute) })
	if _, err := e.client.Approve(ctx, ch.Key, cred); !isCode(err, emulator.CodeKeyExpired) {
		t.Fatalf("expired key: %v", err)
	}
}

// lfSigner signs the text with LF line ends, as one public client did.
type lfSigner struct{ trusted.Signer }

func (s lfSigner) SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error) {
	return s.Signer.SignText(ctx, bytes.ReplaceAll(text, []byte("\r\n"), []byte("\n")), ts)
}

func TestSignatureChecks(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	cred := e.linked(t)
	cms := &signer.CMS{Key: e.key, Cert: e.key.Certificate()}
	soft, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	untrusted := &signer.CMS{Key: soft, Cert: signertest.NewCert(t, soft, signertest.CertOptions{CommonName: "stranger"})}
	ecOnToken := e.tk.Open(t, e.tk.EC.Label) // on the token, but not registered with the partner
	for _, tc := range []struct {
		name string
		edit func(*trusted.Config)
		code string
	}{
		{"stale timestamp", func(c *trusted.Config) { c.Now = func() time.Time { return time.Now().Add(-10 * time.Minute) } }, emulator.CodeStaleTimestamp},
		{"future timestamp", func(c *trusted.Config) { c.Now = func() time.Time { return time.Now().Add(10 * time.Minute) } }, emulator.CodeStaleTimestamp},
		{"LF-only text", func(c *trusted.Config) { c.Signer = lfSigner{cms} }, emulator.CodeInvalidSignature},
		{"untrusted certificate", func(c *trusted.Config) { c.Signer = untrusted }, emulator.CodeUntrustedCertificate},
		{"token key not registered", func(c *trusted.Config) {
			c.Signer = &signer.CMS{Key: ecOnToken, Cert: ecOnToken.Certificate()}
		}, emulator.CodeUntrustedCertificate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.newClient(t, tc.edit).Authenticate(ctx, cred, serviceUser)
			if !isCode(err, tc.code) {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
		})
	}
	// The certified-provider style (no signed attributes) is accepted.
	noAttrs := e.newClient(t, func(c *trusted.Config) {
		c.Signer = &signer.CMS{Key: e.key, Cert: e.key.Certificate(), Options: signer.Options{NoSignedAttributes: true, Hash: crypto.SHA512}}
	})
	if _, err := noAttrs.Session(ctx, cred, serviceUser); err != nil {
		t.Fatal(err)
	}
}

// countingSigner counts the signatures made.
type countingSigner struct {
	trusted.Signer
	n *int
}

func (c countingSigner) SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error) {
	*c.n++
	return c.Signer.SignText(ctx, text, ts)
}

func TestRetries(t *testing.T) {
	var signatures int
	e := newEnv(t, func(c *trusted.Config) { c.Signer = countingSigner{c.Signer, &signatures} })
	ctx := context.Background()
	cred := e.linked(t)
	// 500 twice, then served: step 1 succeeds on its third try, re-signed.
	e.emu.InjectFaults("authenticate-by-truster", emulator.Fault{Status: 500}, emulator.Fault{Status: 500})
	before := e.emu.Stats().Requests["authenticate-by-truster"]
	s, err := e.client.Session(ctx, cred, serviceUser)
	if err != nil {
		t.Fatalf("session after two 500s: %v", err)
	}
	if _, ok := e.emu.LookupSid(s.Sid); !ok {
		t.Fatal("sid unknown to the service")
	}
	if n := e.emu.Stats().Requests["authenticate-by-truster"] - before; n != 3 {
		t.Fatalf("%d authenticate requests, want 3", n)
	}
	if signatures != 3 {
		t.Fatalf("%d signatures for 3 tries: each try must sign a text of its own timestamp", signatures)
	}
	// 500 three times: the error says so after three tries.
	e.emu.InjectFaults("authenticate-by-truster", emulator.Fault{Status: 500}, emulator.Fault{Status: 500}, emulator.Fault{Status: 500})
	_, err = e.client.Authenticate(ctx, cred, serviceUser)
	var se *trusted.ServiceError
	if !errors.As(err, &se) || se.Status != 500 || !se.Temporary() {
		t.Fatalf("err = %v", err)
	}
	// Step 2 reached the server: its 500 is not retried (the Key is spent).
	ch, err := e.client.Authenticate(ctx, cred, serviceUser)
	if err != nil {
		t.Fatal(err)
	}
	e.emu.InjectFaults("approve-truster", emulator.Fault{Status: 500})
	before = e.emu.Stats().Requests["approve-truster"]
	if _, err := e.client.Approve(ctx, ch.Key, cred); !errors.As(err, &se) || se.Status != 500 {
		t.Fatalf("err = %v", err)
	}
	if n := e.emu.Stats().Requests["approve-truster"] - before; n != 1 {
		t.Fatalf("approve tried %d times, want once", n)
	}
}

// countingTransport fails every request before it is written.
type countingTransport struct{ n int }

func (c *countingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	c.n++
	return nil, errors.New("dial tcp: connection refused")
}

func TestApproveRetriedWhenUnsent(t *testing.T) {
	rt := &countingTransport{}
	c, err := trusted.New(trusted.Config{BaseURL: "http://127.0.0.1:1", APIKey: apiKey, Settings: httpx.Settings{Backoff: time.Millisecond, HTTPClient: &http.Client{Transport: rt}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Approve(context.Background(), "AABB", canonical.Credential{Kind: canonical.Phone, Value: userPhone})
	var te *httpx.TransportError
	if !errors.As(err, &te) || rt.n != 3 {
		t.Fatalf("err = %v after %d tries, want a TransportError after 3", err, rt.n)
	}
	assertNoSecrets(t, err.Error())
	if !strings.Contains(err.Error(), "apiKey=0F6C…(36)") {
		t.Fatalf("masked URL missing from %q", err)
	}
}

func TestSlowServiceTimesOut(t *testing.T) {
	e := newEnv(t, func(c *trusted.Config) { c.Timeout = 200 * time.Millisecond; c.Attempts = 2 })
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	cred := canonical.Credential{Kind: canonical.Phone, Value: userPhone}
	e.emu.InjectFaults("register-external-service-id", emulator.Fault{Delay: 10 * time.Second}, emulator.Fault{Delay: 10 * time.Second})
	start := time.Now()
	err := e.client.Link(ctx, serviceUser, cred)
	var te *httpx.TransportError
	if !errors.As(err, &te) || !te.Timeout {
		t.Fatalf("err = %v, want a time-out", err)
	}
	if d := time.Since(start); d > 5*time.Second { // two 200 ms attempts and a pause; the service would take 10 s
		t.Fatalf("gave up after %v", d)
	}
	assertNoSecrets(t, err.Error())
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  trusted.Config
	}{
		{"plain http to a remote host", trusted.Config{BaseURL: "http://auth.example.com", APIKey: apiKey}},
		{"other scheme", trusted.Config{BaseURL: "ftp://auth.example.com", APIKey: apiKey}},
		{"empty", trusted.Config{BaseURL: "", APIKey: apiKey}},
		{"query in base", trusted.Config{BaseURL: "https://auth.example.com/?x=1", APIKey: apiKey}},
		{"empty API key", trusted.Config{BaseURL: "https://auth.example.com"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := trusted.New(tc.cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	for _, ok := range []trusted.Config{
		{BaseURL: "http://127.0.0.1:8080", APIKey: apiKey},
		{BaseURL: "http://[::1]:8080", APIKey: apiKey},
		{BaseURL: "http://localhost", APIKey: apiKey},
		{BaseURL: "http://auth.example.com", APIKey: apiKey, AllowInsecureHTTP: true},
		{BaseURL: "https://auth.example.com/prefix/", APIKey: apiKey},
		{BaseURL: "auth.example.com", APIKey: apiKey}, // https by default
	} {
		if _, err := trusted.New(ok); err != nil {
			t.Errorf("%s: %v", ok.BaseURL, err)
		}
	}
}

func isCode(err error, code string) bool {
	var se *trusted.ServiceError
	return errors.As(err, &se) && se.Code == code
}

func assertNoSecrets(t *testing.T, s string, more ...string) {
	t.Helper()
	for _, secret := range append([]string{apiKey, strings.ToLower(apiKey), otherAPIKey}, more...) {
		if strings.Contains(s, secret) {
			t.Fatalf("secret in %q", s)
		}
	}
}

// TestApproveNotRetriedAfterSending: a step-2 request that reached the server
// and then timed out is not sent again, because the server may have spent
// the single-use Key on it.
func TestApproveNotRetriedAfterSending(t *testing.T) {
	e := newEnv(t, func(c *trusted.Config) { c.Timeout = 300 * time.Millisecond })
	ctx := context.Background()
	cred := e.linked(t)
	ch, err := e.client.Authenticate(ctx, cred, serviceUser)
	if err != nil {
		t.Fatal(err)
	}
	e.emu.InjectFaults("approve-truster", emulator.Fault{Delay: 2 * time.Second}, emulator.Fault{Delay: 2 * time.Second})
	before := e.emu.Stats().Requests["approve-truster"]
	_, err = e.client.Approve(ctx, ch.Key, cred)
	var te *httpx.TransportError
	if !errors.As(err, &te) || !te.Timeout {
		t.Fatalf("err = %v, want a time-out", err)
	}
	if n := e.emu.Stats().Requests["approve-truster"] - before; n != 1 {
		t.Fatalf("approve sent %d times, want once", n)
	}
}

// TestTwoProcessesInOneSecond: two clients (two processes, each with its
// own timestamp memory) authenticate the same user in the same second.
// Their signed requests are byte for byte the same, so the emulator takes
// the second for a replay; that client signs again with the next second's
// timestamp and succeeds.
func TestTwoProcessesInOneSecond(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.linked(t)
	fixed := time.Now().UTC().Truncate(time.Second)
	same := func(c *trusted.Config) { c.Now = func() time.Time { return fixed } }
	for i := range 2 {
		if _, err := e.newClient(t, same).Session(context.Background(), cred, serviceUser); err != nil {
			t.Fatalf("client %d: %v", i+1, err)
		}
	}
	if n := e.emu.Stats().Rejections[emulator.CodeSignatureReused]; n != 1 {
		t.Fatalf("%d replays refused; want the second client's first try", n)
	}
}

// TestTwoProcessesShareAKey: two clients (two processes, as agents whose
// shared store is down) sign the same text in the same second; the
// emulator hands both the same Key, and the other process confirms it
// first, between this client's steps. Step 2 is then refused
// (InvalidKey), and Session starts again from step 1, once, with the next
// second's text and a Key of its own.
func TestTwoProcessesShareAKey(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.linked(t)
	fixed := time.Now().UTC().Truncate(time.Second)
	same := func(c *trusted.Config) { c.Now = func() time.Time { return fixed } }
	other := e.newClient(t, same)
	ch, err := other.Authenticate(context.Background(), cred, serviceUser)
	if err != nil {
		t.Fatal(err)
	}
	var approves, spent atomic.Int32
	client := e.newClient(t, func(c *trusted.Config) {
		same(c)
		c.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.Contains(r.URL.Path, string(trusted.StepApprove)) && approves.Add(1) == 1 {
				// The other process confirms the shared Key first.
				if r.URL.Query().Get("key") == ch.Key {
					spent.Add(1)
				}
				if _, err := other.Approve(r.Context(), ch.Key, cred); err != nil {
					return nil, err
				}
			}
			return http.DefaultTransport.RoundTrip(r)
		})}
	})
	s, err := client.Session(context.Background(), cred, serviceUser)
	if err != nil {
		t.Fatalf("the session after the shared Key was spent: %v", err)
	}
	if s.Sid == "" || spent.Load() != 1 || approves.Load() != 2 {
		t.Fatalf("sid %q; the shared Key sent %d times, step 2 asked %d times: want the shared Key once, then a Key of its own", s.Sid, spent.Load(), approves.Load())
	}
	if n := e.emu.Stats().Rejections[emulator.CodeInvalidKey]; n != 1 {
		t.Fatalf("%d spent Keys refused, want 1", n)
	}

	// A Key lost twice in a row is an error, not a loop.
	approves.Store(0)
	ch, err = other.Authenticate(context.Background(), cred, serviceUser)
	if err != nil {
		t.Fatal(err)
	}
	lost := e.newClient(t, func(c *trusted.Config) {
		c.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.Contains(r.URL.Path, string(trusted.StepApprove)) {
				approves.Add(1)
				q := r.URL.Query()
				q.Set("key", "spent-"+q.Get("key"))
				r.URL.RawQuery = q.Encode()
			}
			return http.DefaultTransport.RoundTrip(r)
		})}
	})
	var se *trusted.ServiceError
	if _, err := lost.Session(context.Background(), cred, serviceUser); !errors.As(err, &se) || !se.KeyLost() || approves.Load() != 2 {
		t.Fatalf("a Key lost twice: %v after %d tries of step 2; want the refusal after 2", err, approves.Load())
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
