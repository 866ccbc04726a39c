package emulator

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/signagent/signagent/emulator/directory"
	"github.com/signagent/signagent/emulator/legacy"
	"github.com/signagent/signagent/envelope"
)

const (
	testDevKey = "testClient-0123456789abcdef"
	boxGUID    = "3f2a0c1e-5b7d-4e8f-9a01-23456789abcd"
	otherBox   = "7d1e2f30-4a5b-4c6d-8e9f-0a1b2c3d4e5f" // a box of another organization
)

// softCert is a certificate with its key in memory: the emulator's side is
// under test here, so the "client" may hold its key (the product's client
// decrypts on the token; see package legacy's tests).
type softCert struct {
	cert *x509.Certificate
	key  *rsa.PrivateKey
}

// softKeys are the soft certificates' keys, one per common name for the
// test binary: an RSA key took most of the package's CPU (seconds under
// the race detector), and no test needs two keys of one name.
var softKeys sync.Map // cn -> func() (*rsa.PrivateKey, error)

func newSoftCert(t *testing.T, cn string) softCert {
	t.Helper()
	gen, _ := softKeys.LoadOrStore(cn, sync.OnceValues(func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) }))
	key, err := gen.(func() (*rsa.PrivateKey, error))()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageKeyEncipherment}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return softCert{cert, key}
}

type legacyBed struct {
	s          *Server
	alice, bob softCert
	mu         sync.Mutex
	now        time.Time
}

func newLegacyBed(t *testing.T, oaep bool, edit ...func(*Config)) *legacyBed {
	t.Helper()
	b := &legacyBed{alice: newSoftCert(t, "alice"), bob: newSoftCert(t, "bob"), now: time.Now()}
	// bcrypt's lowest cost: the bed's users sign in at every test
	// (TestHashPassword tests the configuration's own hashing).
	hashBytes, err := bcrypt.GenerateFromPassword([]byte("correct horse"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	hash := string(hashBytes)
	cfg := &Config{
		Developers: []Developer{{Name: "crm", Key: testDevKey}},
		TokenTTL:   Duration(time.Hour), OAEP: oaep,
		Organizations: []Organization{{ID: "org-1", Inn: "6663003127", FullName: "Horns and Hooves LLC",
			Boxes: []Box{{GUID: boxGUID, Title: "main"}}}, otherOrg},
		Users: []User{
			{ID: "alice", Login: "alice@example.com", PasswordHash: hash, Thumbprints: []string{directory.Thumbprint(b.alice.cert.Raw)},
				Boxes: []string{strings.ReplaceAll(boxGUID, "-", "") + "@box.example"}},
			{ID: "bob", Thumbprints: []string{directory.Thumbprint(b.bob.cert.Raw)}},
		},
	}
	for _, e := range edit {
		e(cfg)
	}
	s, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	s.SetClock(b.clock)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	b.s = s
	return b
}

func (b *legacyBed) clock() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now
}

func (b *legacyBed) advance(d time.Duration) {
	b.mu.Lock()
	b.now = b.now.Add(d)
	b.mu.Unlock()
}

type answer struct {
	status int
	code   string
	body   []byte
	ctype  string
}

func (b *legacyBed) post(t *testing.T, path, auth, ctype string, body []byte) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.s.URL()+path, bytes.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	a := answer{resp.StatusCode, resp.Header.Get("X-Service-ErrorCode"), data, resp.Header.Get("Content-Type")}
	if a.status != 200 && !strings.HasPrefix(a.ctype, "text/plain") {
		t.Errorf("error answer %d has Content-Type %q, want text/plain", a.status, a.ctype)
	}
	return a
}

func (a answer) want(t *testing.T, status int, code, text string) {
	t.Helper()
	if a.status != status || a.code != code || !strings.Contains(string(a.body), text) {
		t.Fatalf("got %d %q %q, want %d %q %q", a.status, a.code, a.body, status, code, text)
	}
}

func (a answer) token(t *testing.T) string {
	t.Helper()
	if a.status != 200 {
		t.Fatalf("got %d %s %q", a.status, a.code, a.body)
	}
	tok := string(a.body)
	if _, err := base64.StdEncoding.DecodeString(tok); err != nil || len(tok) != 172 || !strings.HasSuffix(tok, "=") {
		t.Fatalf("token %q is not 172 characters of standard base64", tok)
	}
	return tok
}

// The headers as the wire notes spell them, written out here rather than by
// the client's legacy package, so that the two are checked against the
// notes separately.
func authHeader(key, tok string) string {
	return "ServiceAuth ddauth_api_client_id=" + key + ",ddauth_token=" + tok
}

func keyHeader(key string) string { return "ServiceAuth ddauth_api_client_id=" + key }

var devHeader = keyHeader(testDevKey)

func TestV3AuthenticateRefusals(t *testing.T) {
	t.Parallel()
	b := newLegacyBed(t, false)
	pw := []byte(`{"login":"alice@example.com","password":"correct horse"}`)
	b.post(t, "/V3/Authenticate?type=password", "", "application/json", pw).want(t, 401, CodeHTTPAuth, "Invalid API client id")
	b.post(t, "/V3/Authenticate?type=password", keyHeader("testClient-unknown"), "application/json", pw).want(t, 401, CodeHTTPAuth, "Invalid API client id")
	b.post(t, "/V3/Authenticate?type=password", "Bearer "+testDevKey, "application/json", pw).want(t, 401, CodeHTTPAuth, "Invalid API client id")
	b.post(t, "/V3/Authenticate", devHeader, "application/json", pw).want(t, 400, CodeBadRequest, "'type' is required")
	b.post(t, "/V3/Authenticate?type=kerberos", devHeader, "application/json", pw).want(t, 400, CodeBadRequest, "Unknown authentication type")
	b.post(t, "/V3/Authenticate?type=password", devHeader, "application/json", []byte(`{"login":"alice@example.com","password":"wrong"}`)).
		want(t, 401, CodeWrongPassword, "Wrong password provided for login")
	b.post(t, "/V3/Authenticate?type=password", devHeader, "application/json", []byte(`{"login":"nobody","password":"correct horse"}`)).
		want(t, 401, CodeWrongPassword, "Wrong password provided for login")
	b.post(t, "/V3/Authenticate?type=password", devHeader, "application/json", []byte(`login=alice`)).want(t, 400, CodeBadRequest, "deserialize")
	pemCert := []byte("-----BEGIN CERTIFICATE-----\n" + base64.StdEncoding.EncodeToString(b.alice.cert.Raw) + "\n-----END CERTIFICATE-----\n")
	b.post(t, "/V3/Authenticate?type=certificate", devHeader, "application/octet-stream", pemCert).
		want(t, 400, CodeBadRequest, "Could not deserialize certificate from the request body")
	stranger := newSoftCert(t, "stranger")
	b.post(t, "/V3/Authenticate?type=certificate", devHeader, "application/octet-stream", stranger.cert.Raw).want(t, 401, CodeUnknownCert, "not registered")
	b.post(t, "/V3/Authenticate?type=sid", devHeader, "text/plain", []byte("no-such-sid")).want(t, 401, CodeInvalidSid, "auth.sid")
	req, _ := http.NewRequest(http.MethodGet, b.s.URL()+"/V3/Authenticate?type=password", nil)
	if a := do(t, req); a.status != 405 {
		t.Fatalf("GET: %d", a.status)
	}
}

func TestV3PasswordAndSid(t *testing.T) {
	t.Parallel()
	b := newLegacyBed(t, false)
	pw := []byte(`{"login":"ALICE@example.com","password":"correct horse"}`)
	// Paths are matched case-insensitively, as the service does.
	t1 := b.post(t, "/v3/authenticate?type=password", devHeader, "application/json", pw).token(t)
	t2 := b.post(t, "/V3/Authenticate?type=password", devHeader, "application/json", pw).token(t)
	if t1 == t2 {
		t.Fatal("two logins got the same token")
	}
	// A new token does not revoke the older one.
	for _, tok := range []string{t1, t2} {
		b.organizations(t, authHeader(testDevKey, tok)).want(t, 200, "", "Horns and Hooves")
	}

	sid := b.s.trusted.Issue(SessionRecord{UserID: "alice", Created: b.clock()})
	tok := b.post(t, "/V3/Authenticate?type=sid", devHeader, "text/plain", []byte(sid+"\n")).token(t)
	b.organizations(t, authHeader(testDevKey, tok)).want(t, 200, "", "6663003127")
	b.advance(24*time.Hour + time.Second)
	b.post(t, "/V3/Authenticate?type=sid", devHeader, "text/plain", []byte(sid)).want(t, 401, CodeInvalidSid, "expired")
}

func (b *legacyBed) organizations(t *testing.T, auth string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.s.URL()+"/GetMyOrganizations?autoRegister=false", nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Accept", "application/json")
	return do(t, req)
}

func TestBusinessAccessCheckLegacy(t *testing.T) {
	t.Parallel()
	b := newLegacyBed(t, false)
	tok := b.post(t, "/V3/Authenticate?type=password", devHeader, "application/json",
		[]byte(`{"login":"alice@example.com","password":"correct horse"}`)).token(t)
	a := b.organizations(t, authHeader(testDevKey, tok))
	var got struct {
		Organizations []struct {
			OrgID string
			Boxes []struct{ BoxID, BoxIDGUID string } `json:"Boxes"`
		}
	}
	if err := json.Unmarshal(a.body, &got); err != nil || len(got.Organizations) != 1 || got.Organizations[0].Boxes[0].BoxID != "3f2a0c1e5b7d4e8f9a0123456789abcd@box.example" {
		t.Fatalf("%s %v", a.body, err)
	}
	b.organizations(t, "").want(t, 401, CodeHTTPAuth, "missing")
	b.organizations(t, keyHeader(testDevKey)).want(t, 401, CodeInvalidAuthToken, "Invalid auth token")
	b.organizations(t, authHeader(testDevKey, tok[:100])).want(t, 401, CodeInvalidAuthToken, "Invalid auth token")
	b.organizations(t, authHeader("testClient-unknown", tok)).want(t, 401, CodeHTTPAuth, "Invalid API client id")
	b.organizations(t, "ServiceAuth ddauth_token="+tok).want(t, 401, CodeHTTPAuth, "Invalid authorization header")
	b.advance(time.Hour)
	b.organizations(t, authHeader(testDevKey, tok)).want(t, 401, CodeInvalidAuthToken, "Invalid auth token")
	if n := b.s.Stats().HeldTokens; n != 1 {
		t.Fatalf("held tokens %d before a sweep", n)
	}
	b.post(t, "/V3/Authenticate?type=password", devHeader, "application/json", []byte(`{"login":"alice@example.com","password":"correct horse"}`)).token(t)
	if n := b.s.Stats().HeldTokens; n != 1 {
		t.Fatalf("held tokens %d: the expired one was not swept", n)
	}
}

// challenge runs type=certificate and opens the envelope with the
// certificate's key, returning the random.
func (b *legacyBed) challenge(t *testing.T, c softCert) ([]byte, envelope.Recipient) {
	t.Helper()
	a := b.post(t, "/V3/Authenticate?type=certificate", devHeader, "application/octet-stream", c.cert.Raw)
	if a.status != 200 || a.ctype != "application/octet-stream" {
		t.Fatalf("%d %q %q", a.status, a.ctype, a.body)
	}
	rs, err := envelope.Recipients(a.body)
	if err != nil || len(rs) != 1 {
		t.Fatalf("%d recipients, %v", len(rs), err)
	}
	random, err := envelope.Open(a.body, c.cert, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return random, rs[0]
}

func (b *legacyBed) confirm(t *testing.T, thumb string, random []byte) answer {
	t.Helper()
	q := url.Values{"thumbprint": {thumb}, "token": {base64.StdEncoding.EncodeToString(random)}}
	return b.post(t, "/V3/AuthenticateConfirm?"+q.Encode(), devHeader, "", nil)
}

func TestV3CertificateChallenge(t *testing.T) {
	t.Parallel()
	for _, oaep := range []bool{false, true} {
		b := newLegacyBed(t, oaep)
		random, r := b.challenge(t, b.alice)
		if want := map[bool]string{false: "1.2.840.113549.1.1.1", true: "1.2.840.113549.1.1.7"}[oaep]; r.Algorithm.String() != want {
			t.Fatalf("oaep=%v: key transport %v", oaep, r.Algorithm)
		}
		aliceThumb := directory.Thumbprint(b.alice.cert.Raw)
		tok := b.confirm(t, aliceThumb, random).token(t)
		b.organizations(t, authHeader(testDevKey, tok)).want(t, 200, "", "org-1")
		// Single-use.
		b.confirm(t, aliceThumb, random).want(t, 403, CodeRndBytesNotFound, "not found")
	}
	b := newLegacyBed(t, false)
	aliceThumb, bobThumb := directory.Thumbprint(b.alice.cert.Raw), directory.Thumbprint(b.bob.cert.Raw)
	// Never issued.
	b.confirm(t, aliceThumb, []byte("whatever")).want(t, 403, CodeRndBytesNotFound, "not found")
	// Issued to another certificate.
	random, _ := b.challenge(t, b.alice)
	b.confirm(t, bobThumb, random).want(t, 403, CodeRndBytesNotFound, "not found")
	// Percent-encoded twice: 400, and the random is still pending.
	twice := url.QueryEscape(url.QueryEscape(base64.StdEncoding.EncodeToString(random)))
	b.post(t, "/V3/AuthenticateConfirm?thumbprint="+aliceThumb+"&token="+twice, devHeader, "", nil).want(t, 400, CodeBadRequest, "percent-encoded once")
	// A wrong random spends the pending one.
	b.confirm(t, aliceThumb, []byte("not the random")).want(t, 401, CodeRndBytesMismatch, "does not match")
	b.confirm(t, aliceThumb, random).want(t, 403, CodeRndBytesNotFound, "not found")
	// A newer login replaces the pending random; the old one is refused.
	old, _ := b.challenge(t, b.alice)
	newer, _ := b.challenge(t, b.alice)
	b.confirm(t, aliceThumb, old).want(t, 401, CodeRndBytesMismatch, "does not match")
	_ = newer
	// Expired.
	random, _ = b.challenge(t, b.alice)
	b.advance(10*time.Minute + time.Second)
	b.confirm(t, aliceThumb, random).want(t, 403, CodeRndBytesNotFound, "not found")
	// Without thumbprint the body is the certificate.
	random, _ = b.challenge(t, b.bob)
	q := url.Values{"token": {base64.StdEncoding.EncodeToString(random)}}
	b.post(t, "/V3/AuthenticateConfirm?"+q.Encode(), devHeader, "application/octet-stream", b.bob.cert.Raw).token(t)
	b.post(t, "/V3/AuthenticateConfirm?"+q.Encode(), devHeader, "application/octet-stream", []byte("junk")).want(t, 400, CodeBadRequest, "thumbprint")
	if st := b.s.Stats(); st.PendingRandoms != 0 {
		t.Fatalf("%d randoms still pending", st.PendingRandoms)
	}
}

// TestV3ChallengeFault: with challengeFault: document, a certificate login
// is answered with an 87-byte document sealed to the certificate, which the
// client's envelope.Open refuses, and which AuthenticateConfirm would take
// back as the answer (the hostile service the fault stands for).
func TestV3ChallengeFault(t *testing.T) {
	t.Parallel()
	b := newLegacyBed(t, false, func(c *Config) { c.ChallengeFault = ChallengeDocument })
	a := b.post(t, "/V3/Authenticate?type=certificate", devHeader, "application/octet-stream", b.alice.cert.Raw)
	if _, err := envelope.Open(a.body, b.alice.cert, b.alice.key); !errors.Is(err, envelope.ErrNotChallenge) || !strings.Contains(err.Error(), "96 bytes") {
		t.Fatalf("the document was not refused: %v", err)
	}
	if len(legacy.FaultDocument) != 87 {
		t.Fatalf("the document is %d bytes", len(legacy.FaultDocument))
	}
	b.confirm(t, directory.Thumbprint(b.alice.cert.Raw), legacy.FaultDocument).token(t)
}

func TestEmulatorLegacyConfigRefusals(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]Config{
		"nobody":         {},
		"bad hash":       {Developers: []Developer{{Key: "k-1"}}, Users: []User{{ID: "u", Login: "u", PasswordHash: "plain"}}},
		"login no hash":  {Developers: []Developer{{Key: "k-1"}}, Users: []User{{ID: "u", Login: "u"}}},
		"key with space": {Developers: []Developer{{Key: "k 1"}}},
		"same key":       {Developers: []Developer{{Key: "k-1"}, {Key: "k-1"}}},
		"unknown box":    {Developers: []Developer{{Key: "k-1"}}, Users: []User{{ID: "u", Boxes: []string{boxGUID}}}},
		"box not a guid": {Developers: []Developer{{Key: "k-1"}}, Organizations: []Organization{{ID: "o", FullName: "O", Boxes: []Box{{GUID: "abc"}}}}},
		"unknown fault":  {Developers: []Developer{{Key: "k-1"}}, ChallengeFault: "garbage"},
	} {
		if _, err := New(&cfg, zerolog.Nop()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestHashPassword: a configuration's passwordHash is bcrypt at its
// default cost, over the password without its line ending (a password
// file's last newline).
func TestHashPassword(t *testing.T) {
	hash, err := HashPassword([]byte("correct horse\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cost, err := bcrypt.Cost([]byte(hash)); err != nil || cost != bcrypt.DefaultCost {
		t.Errorf("cost %d (%v), want %d", cost, err, bcrypt.DefaultCost)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte("correct horse")); err != nil {
		t.Errorf("the password without its newline: %v", err)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte("correct horse\n")); err == nil {
		t.Error("the hash is of the password with its newline")
	}
}
