package emulator

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/signagent/signagent/safefile"
)

// OIDCConfig is the identity provider's side: its clients and lifetimes.
// Users sign in with their login and password.
type OIDCConfig struct {
	Clients []OIDCClient `yaml:"clients"`
	// AccessTokenTTL is the access token's expires_in (default 24h).
	AccessTokenTTL Duration `yaml:"accessTokenTTL"`
	// RefreshTokenTTL is a refresh token's lifetime (default 720h, 30 days).
	RefreshTokenTTL Duration `yaml:"refreshTokenTTL"`
	// RefreshRotation is "reuse" (default: a refresh returns the same
	// refresh token) or "one-time" (a new one; the old one is spent).
	RefreshRotation string `yaml:"refreshRotation"`
	// CodeTTL is an authorization code's lifetime (default 5m).
	CodeTTL Duration `yaml:"codeTTL"`
	// DeviceInterval and DeviceExpiresIn are the device flow's interval
	// and expires_in (defaults 5s and 300s).
	DeviceInterval  Duration `yaml:"deviceInterval"`
	DeviceExpiresIn Duration `yaml:"deviceExpiresIn"`
	// NoDiscovery answers 404 to /.well-known/openid-configuration, as a
	// provider without discovery does (clients use the /connect/* paths).
	NoDiscovery bool `yaml:"noDiscovery"`
}

// OIDCClient is an application registered with the identity provider.
type OIDCClient struct {
	ID           string   `yaml:"id"`
	Secret       string   `yaml:"secret"`
	SecretFile   string   `yaml:"secretFile"`
	RedirectURIs []string `yaml:"redirectUris"`
}

// Scopes the provider knows.
var knownScopes = []string{"openid", "profile", "email", "offline_access", "Service.PublicAPI", "Service.PublicAPI.Staging"}

func (o *OIDCConfig) check(dir string) error {
	defaults := []struct {
		d *Duration
		v time.Duration
	}{{&o.AccessTokenTTL, 24 * time.Hour}, {&o.RefreshTokenTTL, 720 * time.Hour}, {&o.CodeTTL, 5 * time.Minute},
		{&o.DeviceInterval, 5 * time.Second}, {&o.DeviceExpiresIn, 300 * time.Second}}
	for _, d := range defaults {
		if *d.d <= 0 {
			*d.d = Duration(d.v)
		}
	}
	switch o.RefreshRotation {
	case "":
		o.RefreshRotation = "reuse"
	case "reuse", "one-time":
	default:
		return fmt.Errorf("oidc: refreshRotation %q: want reuse or one-time", o.RefreshRotation)
	}
	ids := map[string]bool{}
	for i := range o.Clients {
		c := &o.Clients[i]
		if c.ID == "" || ids[c.ID] {
			return fmt.Errorf("oidc: client %d: an id is missing or repeated", i+1)
		}
		ids[c.ID] = true
		if c.SecretFile != "" {
			b, err := safefile.Read(resolve(dir, c.SecretFile), 4096)
			if err != nil {
				return fmt.Errorf("oidc: client %q: %w", c.ID, err)
			}
			c.Secret = strings.TrimRight(string(b), "\r\n")
		}
		if c.Secret == "" {
			return fmt.Errorf("oidc: client %q has no secret", c.ID)
		}
		for _, u := range c.RedirectURIs {
			if p, err := url.Parse(u); err != nil || p.Scheme == "" || p.Host == "" || p.Fragment != "" {
				return fmt.Errorf("oidc: client %q: redirect URI %q is not an absolute URL without a fragment", c.ID, u)
			}
		}
	}
	return nil
}

// idp is the identity provider's state.
type idp struct {
	key     *rsa.PrivateKey
	kid     string
	signer  jose.Signer
	codes   map[string]*authCode
	devices map[string]*deviceGrant // by device_code
	access  map[string]grant        // access tokens
	refresh map[string]grant        // refresh tokens
	// spent are one-time refresh tokens already used, by their grant's
	// family: one presented again revokes the whole family, as real
	// providers do on a reuse (RFC 9700 4.14.2).
	spent map[string]string
}

// grant is what a token stands for.
type grant struct {
	client, user, scope, nonce string
	expires                    time.Time
	family                     string // the sign-in its refresh tokens descend from
}

type authCode struct {
	grant
	redirectURI, challenge, method string
}

type deviceGrant struct {
	grant
	userCode string
	status   string // pending, approved, denied
	interval time.Duration
	lastPoll time.Time
}

func newIDP() (*idp, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	kid := randomHex(8)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, err
	}
	return &idp{key: key, kid: kid, signer: signer, codes: map[string]*authCode{}, devices: map[string]*deviceGrant{},
		access: map[string]grant{}, refresh: map[string]grant{}}, nil
}

// oidcError writes an OAuth error body: {"error": ...}, no-store.
func oidcError(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="emulator"`)
	}
	w.WriteHeader(status)
	body := map[string]string{"error": code}
	if desc != "" {
		body["error_description"] = desc
	}
	json.NewEncoder(w).Encode(body)
}

func noStoreJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, http.StatusOK, v)
}

// oidcRoute serves the identity provider's endpoints; ok is false for
// other paths.
func (s *Server) oidcRoute(w http.ResponseWriter, r *http.Request) (ok bool) {
	routes := map[string]http.HandlerFunc{
		"GET /.well-known/openid-configuration":      s.discovery,
		"GET /.well-known/openid-configuration/jwks": s.jwks,
		"GET /connect/authorize":                     s.authorizePage,
		"POST /connect/authorize":                    s.authorizeSubmit,
		"POST /connect/deviceauthorization":          s.deviceAuthorization,
		"GET /device":                                s.devicePage,
		"POST /device":                               s.deviceSubmit,
		"POST /connect/token":                        s.token,
		"GET /connect/userinfo":                      s.userinfo,
	}
	h, found := routes[r.Method+" "+r.URL.Path]
	if !found {
		for k := range routes {
			if strings.HasSuffix(k, " "+r.URL.Path) {
				w.Header().Set("Allow", strings.Fields(k)[0])
				oidcError(w, http.StatusMethodNotAllowed, "invalid_request", "method not allowed")
				return true
			}
		}
		return false
	}
	if s.takeFault(w, r, r.URL.Path) {
		return true
	}
	h(w, r)
	return true
}

func (s *Server) discovery(w http.ResponseWriter, r *http.Request) {
	if s.cfg.OIDC.NoDiscovery {
		http.NotFound(w, r)
		return
	}
	base := s.URL()
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                base,
		"authorization_endpoint":                base + "/connect/authorize",
		"token_endpoint":                        base + "/connect/token",
		"device_authorization_endpoint":         base + "/connect/deviceauthorization",
		"userinfo_endpoint":                     base + "/connect/userinfo",
		"jwks_uri":                              base + "/.well-known/openid-configuration/jwks",
		"scopes_supported":                      knownScopes,
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"code_challenge_methods_supported":      []string{"plain", "S256"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_post", "client_secret_basic"},
	})
}

func (s *Server) jwks(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &s.idp.key.PublicKey, KeyID: s.idp.kid, Algorithm: string(jose.RS256), Use: "sig"}}})
}

// client authenticates the calling application: client_id and
// client_secret in the form body, or HTTP Basic, or both when they agree.
func (s *Server) client(r *http.Request) (*OIDCClient, bool) {
	id, secret := r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	if bid, bsecret, ok := r.BasicAuth(); ok {
		bid, _ = url.QueryUnescape(bid)
		bsecret, _ = url.QueryUnescape(bsecret)
		if (id != "" && id != bid) || (secret != "" && secret != bsecret) {
			return nil, true
		}
		id, secret = bid, bsecret
	}
	for i := range s.cfg.OIDC.Clients {
		c := &s.cfg.OIDC.Clients[i]
		if c.ID == id && subtle.ConstantTimeCompare([]byte(c.Secret), []byte(secret)) == 1 {
			return c, false
		}
	}
	_, _, basic := r.BasicAuth()
	return nil, basic
}

// formClient reads a token-endpoint form and authenticates its client;
// nil when it has answered the request (a bad form, invalid_client: 400,
// or 401 when HTTP Basic was tried).
func (s *Server) formClient(w http.ResponseWriter, r *http.Request) *OIDCClient {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		oidcError(w, http.StatusBadRequest, "invalid_request", "the body is not a form")
		return nil
	}
	c, basic := s.client(r)
	if c == nil {
		status := http.StatusBadRequest
		if basic {
			status = http.StatusUnauthorized
		}
		s.reject("invalid_client")
		oidcError(w, status, "invalid_client", "")
	}
	return c
}

func (s *Server) clientByID(id string) *OIDCClient {
	for i := range s.cfg.OIDC.Clients {
		if s.cfg.OIDC.Clients[i].ID == id {
			return &s.cfg.OIDC.Clients[i]
		}
	}
	return nil
}

// checkScope refuses a scope the provider does not know.
func checkScope(scope string) (string, bool) {
	fields := strings.Fields(scope)
	for _, f := range fields {
		if !slices.Contains(knownScopes, f) {
			return f, false
		}
	}
	return "", true
}

func hasScope(scope, want string) bool { return slices.Contains(strings.Fields(scope), want) }

// token is POST /connect/token for the three grants.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	c := s.formClient(w, r)
	if c == nil {
		return
	}
	var g grant
	var errCode, desc string
	switch gt := r.PostForm.Get("grant_type"); gt {
	case "authorization_code":
		g, errCode, desc = s.redeemCode(c, r.PostForm)
	case "urn:ietf:params:oauth:grant-type:device_code":
		g, errCode, desc = s.pollDevice(c, r.PostForm.Get("device_code"))
	case "refresh_token":
		g, errCode, desc = s.redeemRefresh(c, r.PostForm.Get("refresh_token"))
	default:
		errCode, desc = "unsupported_grant_type", gt
	}
	if errCode != "" {
		s.reject(errCode)
		oidcError(w, http.StatusBadRequest, errCode, desc)
		return
	}
	resp, err := s.issue(g, r.PostForm.Get("grant_type") == "refresh_token", r.PostForm.Get("refresh_token"))
	if err != nil {
		oidcError(w, http.StatusInternalServerError, "server_error", "")
		return
	}
	noStoreJSON(w, resp)
}

func (s *Server) reject(code string) {
	s.mu.Lock()
	s.stats.Rejections[code]++
	s.mu.Unlock()
}

func (s *Server) redeemCode(c *OIDCClient, f url.Values) (grant, string, string) {
	now := s.clock()
	s.mu.Lock()
	ac, ok := s.idp.codes[f.Get("code")]
	delete(s.idp.codes, f.Get("code")) // single-use: spent by any attempt
	s.mu.Unlock()
	switch {
	case !ok || !now.Before(ac.expires):
		return grant{}, "invalid_grant", "the code is unknown, used or expired"
	case ac.client != c.ID:
		return grant{}, "invalid_grant", "the code was issued to another client"
	case ac.redirectURI != f.Get("redirect_uri"):
		return grant{}, "invalid_grant", "redirect_uri differs from the authorization request's"
	case ac.challenge != "" && !pkceMatches(ac.challenge, ac.method, f.Get("code_verifier")):
		return grant{}, "invalid_grant", "code_verifier does not match the code_challenge"
	}
	return ac.grant, "", ""
}

func pkceMatches(challenge, method, verifier string) bool {
	if verifier == "" {
		return false
	}
	if method == "S256" {
		sum := sha256.Sum256([]byte(verifier))
		verifier = base64.RawURLEncoding.EncodeToString(sum[:])
	}
	return subtle.ConstantTimeCompare([]byte(challenge), []byte(verifier)) == 1
}

func (s *Server) redeemRefresh(c *OIDCClient, rt string) (grant, string, string) {
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.idp.refresh[rt]
	if family, reused := s.idp.spent[rt]; !ok && reused {
		// A spent one-time refresh token: theft, as a provider sees it.
		// Every refresh token of the sign-in is revoked.
		for k, rg := range s.idp.refresh {
			if rg.family == family {
				delete(s.idp.refresh, k)
			}
		}
		s.stats.RefreshReuses++
		return grant{}, "invalid_grant", "the refresh token was already used; the grant is revoked"
	}
	switch {
	case !ok || !now.Before(g.expires):
		return grant{}, "invalid_grant", "the refresh token is unknown, rotated away or expired"
	case g.client != c.ID:
		return grant{}, "invalid_grant", "the refresh token was issued to another client"
	}
	if s.cfg.OIDC.RefreshRotation == "one-time" {
		delete(s.idp.refresh, rt)
		if s.idp.spent == nil {
			s.idp.spent = map[string]string{}
		}
		s.idp.spent[rt] = g.family
	}
	s.stats.Refreshes++
	return g, "", ""
}

// issue makes the token response for g: an opaque access token, a refresh
// token with offline_access (the same one again on a refresh under
// "reuse"), and an id_token with openid.
func (s *Server) issue(g grant, refreshing bool, oldRefresh string) (map[string]any, error) {
	now := s.clock()
	ttl := time.Duration(s.cfg.OIDC.AccessTokenTTL)
	at := randomHex(32)
	resp := map[string]any{"access_token": strings.ToLower(at), "token_type": "Bearer",
		"expires_in": int(ttl.Seconds()), "scope": g.scope}
	s.mu.Lock()
	s.sweepOIDC(now)
	a := g
	a.expires = now.Add(ttl)
	s.idp.access[strings.ToLower(at)] = a
	if hasScope(g.scope, "offline_access") {
		rt := oldRefresh
		if !refreshing || s.cfg.OIDC.RefreshRotation == "one-time" {
			rt = randomToken(32)
			rg := g
			rg.expires = now.Add(time.Duration(s.cfg.OIDC.RefreshTokenTTL))
			if rg.family == "" {
				rg.family = randomHex(8) // a new sign-in
			}
			s.idp.refresh[rt] = rg
		}
		resp["refresh_token"] = rt
	}
	s.stats.AccessTokens++
	s.mu.Unlock()
	if hasScope(g.scope, "openid") {
		idt, err := s.idToken(g, now, ttl)
		if err != nil {
			return nil, err
		}
		resp["id_token"] = idt
	}
	return resp, nil
}

func (s *Server) idToken(g grant, now time.Time, ttl time.Duration) (string, error) {
	claims := map[string]any{"iss": s.URL(), "sub": g.user, "aud": g.client, "iat": now.Unix(),
		"exp": now.Add(min(ttl, time.Hour)).Unix(), "auth_time": now.Unix()}
	if g.nonce != "" {
		claims["nonce"] = g.nonce
	}
	for _, u := range s.cfg.Users {
		if u.ID == g.user {
			if hasScope(g.scope, "email") {
				claims["email"] = u.Login
			}
			if hasScope(g.scope, "profile") {
				claims["name"] = u.ID
			}
		}
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	jws, err := s.idp.signer.Sign(payload)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

func (s *Server) userinfo(w http.ResponseWriter, r *http.Request) {
	g, ok := s.bearer(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		oidcError(w, http.StatusUnauthorized, "invalid_token", "")
		return
	}
	info := map[string]any{"sub": g.user}
	for _, u := range s.cfg.Users {
		if u.ID == g.user && u.Login != "" {
			info["email"] = u.Login
		}
	}
	noStoreJSON(w, info)
}

// bearer is the grant behind "Bearer <access token>", when it is valid.
func (s *Server) bearer(header string) (grant, bool) {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || tok == "" {
		return grant{}, false
	}
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.idp.access[tok]
	return g, ok && now.Before(g.expires)
}

// sweepOIDC forgets expired codes, device grants and tokens, at most once
// a second; the caller holds s.mu.
func (s *Server) sweepOIDC(now time.Time) {
	if now.Before(s.nextOIDCSweep) {
		return
	}
	s.nextOIDCSweep = now.Add(time.Second)
	for k, c := range s.idp.codes {
		if !now.Before(c.expires) {
			delete(s.idp.codes, k)
		}
	}
	for k, d := range s.idp.devices {
		if !now.Before(d.expires) {
			delete(s.idp.devices, k)
		}
	}
	for _, m := range []map[string]grant{s.idp.access, s.idp.refresh} {
		for k, g := range m {
			if !now.Before(g.expires) {
				delete(m, k)
			}
		}
	}
}
