package emulator

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"
)

const (
	clientID     = "crm-app"
	clientSecret = "s3cret-of-the-app"
	redirectURI  = "http://127.0.0.1:8765/callback"
)

type idpBed struct{ *legacyBed }

func newIDPBed(t *testing.T, edit func(*OIDCConfig)) idpBed {
	t.Helper()
	b := &legacyBed{now: time.Now()}
	// The cheapest bcrypt cost: the emulator checks the password at every
	// sign-in, and at the default cost that took seconds of CPU under -race.
	hashBytes, _ := bcrypt.GenerateFromPassword([]byte("correct horse"), bcrypt.MinCost)
	hash := string(hashBytes)
	cfg := &Config{
		OIDC: OIDCConfig{Clients: []OIDCClient{{ID: clientID, Secret: clientSecret, RedirectURIs: []string{redirectURI}}},
			AccessTokenTTL: Duration(time.Minute), DeviceInterval: Duration(3 * time.Second)},
		Organizations: []Organization{{ID: "org-1", FullName: "Horns and Hooves LLC", Boxes: []Box{{GUID: boxGUID}}}, otherOrg},
		Users:         []User{{ID: "alice", Login: "alice@example.com", PasswordHash: hash, Boxes: []string{boxGUID}}},
	}
	if edit != nil {
		edit(&cfg.OIDC)
	}
	s, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	s.SetClock(b.clock)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(t.Context()) })
	b.s = s
	return idpBed{b}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (b idpBed) form(t *testing.T, path string, v url.Values, basic bool) (int, map[string]any, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.s.URL()+path, strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if basic {
		req.SetBasicAuth(clientID, clientSecret)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m, resp.Header
}

func creds(v url.Values) url.Values {
	v.Set("client_id", clientID)
	v.Set("client_secret", clientSecret)
	return v
}

func wantError(t *testing.T, status int, m map[string]any, h http.Header, wantStatus int, code string) {
	t.Helper()
	if status != wantStatus || m["error"] != code || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("got %d %v (Cache-Control %q), want %d %s", status, m, h.Get("Cache-Control"), wantStatus, code)
	}
}

// signIn runs the authorization request through the sign-in form as a
// browser would (without one: the pages are plain forms) and returns the
// redirect's query.
func (b idpBed) signIn(t *testing.T, q url.Values, login, password, decision string) (int, url.Values) {
	t.Helper()
	resp, err := http.Get(b.s.URL() + "/connect/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.StatusCode, nil
	}
	f := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(string(page), -1) {
		f.Set(m[1], htmlUnescape(m[2]))
	}
	f.Set("login", login)
	f.Set("password", password)
	f.Set("decision", decision)
	post, err := noRedirect.PostForm(b.s.URL()+"/connect/authorize", f)
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	if post.StatusCode != http.StatusFound {
		return post.StatusCode, nil
	}
	loc, _ := url.Parse(post.Header.Get("Location"))
	if !strings.HasPrefix(loc.String(), redirectURI+"?") {
		t.Fatalf("redirected to %s", loc)
	}
	return post.StatusCode, loc.Query()
}

func htmlUnescape(s string) string {
	return strings.NewReplacer("&amp;", "&", "&#43;", "+", "&#34;", `"`, "&#39;", "'", "&lt;", "<", "&gt;", ">").Replace(s)
}

func authQuery(verifier string) url.Values {
	sum := sha256.Sum256([]byte(verifier))
	return url.Values{"client_id": {clientID}, "redirect_uri": {redirectURI}, "response_type": {"code"},
		"scope": {"openid profile email offline_access Service.PublicAPI.Staging"}, "state": {"st-1"}, "nonce": {"n-1"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}}
}

func TestCodeFlow(t *testing.T) {
	t.Parallel()
	b := newIDPBed(t, nil)
	verifier := strings.Repeat("v", 43)
	_, back := b.signIn(t, authQuery(verifier), "alice@example.com", "correct horse", "allow")
	if back.Get("state") != "st-1" || back.Get("code") == "" {
		t.Fatalf("redirect query %v", back)
	}
	exchange := url.Values{"grant_type": {"authorization_code"}, "code": {back.Get("code")}, "redirect_uri": {redirectURI}, "code_verifier": {verifier}}
	st, tok, _ := b.form(t, "/connect/token", creds(exchange), false)
	if st != 200 || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(tok["access_token"].(string)) || tok["refresh_token"] == nil || tok["expires_in"] != 60.0 {
		t.Fatalf("%d %v", st, tok)
	}
	claims := b.verifyIDToken(t, tok["id_token"].(string))
	if claims["aud"] != clientID || claims["nonce"] != "n-1" || claims["sub"] != "alice" || claims["iss"] != b.s.URL() || claims["email"] != "alice@example.com" {
		t.Fatalf("claims %v", claims)
	}
	// The code is single-use.
	st, m, h := b.form(t, "/connect/token", creds(exchange), false)
	wantError(t, st, m, h, 400, "invalid_grant")
	// The access token calls a business method and userinfo.
	req, _ := http.NewRequest(http.MethodGet, b.s.URL()+"/GetMyOrganizations?autoRegister=false", nil)
	req.Header.Set("Authorization", "Bearer "+tok["access_token"].(string))
	if a := do(t, req); a.status != 200 || !strings.Contains(string(a.body), "Horns and Hooves") {
		t.Fatalf("business call: %d %s", a.status, a.body)
	}
	b.advance(time.Minute)
	if a := do(t, req); a.status != 401 {
		t.Fatalf("expired access token: %d", a.status)
	}
}

func (b idpBed) verifyIDToken(t *testing.T, raw string) map[string]any {
	t.Helper()
	resp, err := http.Get(b.s.URL() + "/.well-known/openid-configuration/jwks")
	if err != nil {
		t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	json.NewDecoder(resp.Body).Decode(&set)
	resp.Body.Close()
	jws, err := jose.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	payload, err := jws.Verify(set.Keys[0].Key)
	if err != nil {
		t.Fatalf("id_token does not verify with the JWKS: %v", err)
	}
	var claims map[string]any
	json.Unmarshal(payload, &claims)
	return claims
}

func TestCodeFlowRefusals(t *testing.T) {
	t.Parallel()
	b := newIDPBed(t, nil)
	verifier := strings.Repeat("w", 43)
	q := authQuery(verifier)
	// Deny: back to the client with access_denied and the state.
	if _, back := b.signIn(t, q, "alice@example.com", "correct horse", "deny"); back.Get("error") != "access_denied" || back.Get("state") != "st-1" {
		t.Fatalf("deny: %v", back)
	}
	// A wrong password shows the form again.
	if st, _ := b.signIn(t, q, "alice@example.com", "wrong", "allow"); st != 401 {
		t.Fatalf("wrong password: %d", st)
	}
	// Unknown client, unregistered redirect URI: a page, not a redirect.
	for name, edit := range map[string]func(url.Values){
		"unknown client":   func(v url.Values) { v.Set("client_id", "nope") },
		"unregistered uri": func(v url.Values) { v.Set("redirect_uri", "http://127.0.0.1:9/evil") },
	} {
		v := authQuery(verifier)
		edit(v)
		if st, _ := b.signIn(t, v, "alice@example.com", "correct horse", "allow"); st != 400 {
			t.Fatalf("%s: %d", name, st)
		}
	}
	code := func() string {
		_, back := b.signIn(t, q, "alice@example.com", "correct horse", "allow")
		return back.Get("code")
	}
	for name, tc := range map[string]struct {
		v      url.Values
		basic  bool
		status int
		err    string
	}{
		"wrong verifier":     {url.Values{"code_verifier": {"x" + verifier}}, false, 400, "invalid_grant"},
		"other redirect uri": {url.Values{"redirect_uri": {"http://127.0.0.1:1/x"}}, false, 400, "invalid_grant"},
		"wrong secret basic": {url.Values{"client_secret": {"wrong"}}, true, 401, "invalid_client"},
		"wrong secret form":  {url.Values{"client_secret": {"wrong"}}, false, 400, "invalid_client"},
		"unknown client":     {url.Values{"client_id": {"nope"}}, false, 400, "invalid_client"},
	} {
		v := creds(url.Values{"grant_type": {"authorization_code"}, "code": {code()}, "redirect_uri": {redirectURI}, "code_verifier": {verifier}})
		for k, vals := range tc.v {
			v[k] = vals
		}
		t.Run(name, func(t *testing.T) {
			st, m, h := b.form(t, "/connect/token", v, tc.basic)
			wantError(t, st, m, h, tc.status, tc.err)
		})
	}
	// A code after 5 minutes.
	c := code()
	b.advance(5*time.Minute + time.Second)
	st, m, h := b.form(t, "/connect/token", creds(url.Values{"grant_type": {"authorization_code"}, "code": {c}, "redirect_uri": {redirectURI}, "code_verifier": {verifier}}), false)
	wantError(t, st, m, h, 400, "invalid_grant")
	// Basic alone authenticates the client.
	c = code()
	st, m, _ = b.form(t, "/connect/token", url.Values{"grant_type": {"authorization_code"}, "code": {c}, "redirect_uri": {redirectURI}, "code_verifier": {verifier}}, true)
	if st != 200 {
		t.Fatalf("Basic: %d %v", st, m)
	}
}

func TestDeviceFlow(t *testing.T) {
	t.Parallel()
	b := newIDPBed(t, nil)
	st, da, _ := b.form(t, "/connect/deviceauthorization", creds(url.Values{"scope": {"openid offline_access Service.PublicAPI"}}), false)
	uc, _ := da["user_code"].(string)
	if st != 200 || !regexp.MustCompile(`^[A-Z]{8}$`).MatchString(uc) || da["interval"] != 3.0 ||
		da["verification_uri_complete"] != b.s.URL()+"/device?user-code="+uc {
		t.Fatalf("%d %v", st, da)
	}
	poll := func() (int, map[string]any, http.Header) {
		return b.form(t, "/connect/token", creds(url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {da["device_code"].(string)}}), false)
	}
	st, m, h := poll() // before the first interval
	wantError(t, st, m, h, 400, "slow_down")
	b.advance(8 * time.Second) // 3 + 5
	st, m, h = poll()
	wantError(t, st, m, h, 400, "authorization_pending")
	// The user enters the code on the page.
	resp, err := http.PostForm(b.s.URL()+"/device", url.Values{"user_code": {strings.ToLower(uc[:4]) + "-" + uc[4:]}, "login": {"alice@example.com"}, "password": {"correct horse"}, "decision": {"allow"}})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("device page: %v %d", err, resp.StatusCode)
	}
	resp.Body.Close()
	b.advance(8 * time.Second)
	if st, tok, _ := poll(); st != 200 || tok["access_token"] == nil || tok["refresh_token"] == nil {
		t.Fatalf("%d %v", st, tok)
	}
	// Denied, and expired.
	for _, deny := range []bool{true, false} {
		_, da, _ = b.form(t, "/connect/deviceauthorization", creds(url.Values{"scope": {"openid"}}), false)
		if deny {
			resp, _ := http.PostForm(b.s.URL()+"/device", url.Values{"user_code": {da["user_code"].(string)}, "decision": {"deny"}})
			resp.Body.Close()
			b.advance(3 * time.Second)
			st, m, h = poll()
			wantError(t, st, m, h, 400, "access_denied")
		} else {
			b.advance(301 * time.Second)
			st, m, h = poll()
			wantError(t, st, m, h, 400, "expired_token")
		}
	}
}

func TestRefreshRotation(t *testing.T) {
	t.Parallel()
	for _, rotation := range []string{"reuse", "one-time"} {
		b := newIDPBed(t, func(o *OIDCConfig) { o.RefreshRotation = rotation })
		_, back := b.signIn(t, authQuery(strings.Repeat("r", 43)), "alice@example.com", "correct horse", "allow")
		_, tok, _ := b.form(t, "/connect/token", creds(url.Values{"grant_type": {"authorization_code"}, "code": {back.Get("code")},
			"redirect_uri": {redirectURI}, "code_verifier": {strings.Repeat("r", 43)}}), false)
		rt := tok["refresh_token"].(string)
		st, again, _ := b.form(t, "/connect/token", creds(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}), false)
		if st != 200 || (rotation == "reuse") != (again["refresh_token"] == rt) {
			t.Fatalf("%s: %d %v", rotation, st, again)
		}
		st, m, h := b.form(t, "/connect/token", creds(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}), false)
		if rotation == "one-time" {
			wantError(t, st, m, h, 400, "invalid_grant")
		} else if st != 200 {
			t.Fatalf("reuse: the same refresh token again: %d", st)
		}
	}
}
