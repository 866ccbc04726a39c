// Package idp is the emulator's identity provider (OpenID Connect):
// discovery, keys, the authorization-code flow with its sign-in page, the
// device flow with its /device page, the token endpoint for the three
// grants (one-time refresh tokens, their reuse detected), userinfo, and
// the check of a business call's Bearer token.
package idp

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/signagent/signagent/emulator/directory"
	"github.com/signagent/signagent/emulator/kit"
	"github.com/signagent/signagent/safefile"
)

// Config is the identity provider's side: its clients and lifetimes.
// Users sign in with their login and password.
type Config struct {
	Clients []Client `yaml:"clients"`
	// AccessTokenTTL is the access token's expires_in (default 24h).
	AccessTokenTTL kit.Duration `yaml:"accessTokenTTL"`
	// RefreshTokenTTL is a refresh token's lifetime (default 720h, 30 days).
	RefreshTokenTTL kit.Duration `yaml:"refreshTokenTTL"`
	// RefreshRotation is "reuse" (default: a refresh returns the same
	// refresh token) or "one-time" (a new one; the old one is spent).
	RefreshRotation string `yaml:"refreshRotation"`
	// CodeTTL is an authorization code's lifetime (default 5m).
	CodeTTL kit.Duration `yaml:"codeTTL"`
	// DeviceInterval and DeviceExpiresIn are the device flow's interval
	// and expires_in (defaults 5s and 300s).
	DeviceInterval  kit.Duration `yaml:"deviceInterval"`
	DeviceExpiresIn kit.Duration `yaml:"deviceExpiresIn"`
	// NoDiscovery answers 404 to /.well-known/openid-configuration, as a
	// provider without discovery does (clients use the /connect/* paths).
	NoDiscovery bool `yaml:"noDiscovery"`
}

// Client is an application registered with the identity provider.
type Client struct {
	ID           string   `yaml:"id"`
	Secret       string   `yaml:"secret"`
	SecretFile   string   `yaml:"secretFile"`
	RedirectURIs []string `yaml:"redirectUris"`
}

// Scopes the provider knows.
var knownScopes = []string{"openid", "profile", "email", "offline_access", "Service.PublicAPI", "Service.PublicAPI.Staging"}

// Check fills in the defaults and checks the configuration, its files
// relative to dir.
func (o *Config) Check(dir string) error {
	defaults := []struct {
		d *kit.Duration
		v time.Duration
	}{{&o.AccessTokenTTL, 24 * time.Hour}, {&o.RefreshTokenTTL, 720 * time.Hour}, {&o.CodeTTL, 5 * time.Minute},
		{&o.DeviceInterval, 5 * time.Second}, {&o.DeviceExpiresIn, 300 * time.Second}}
	for _, d := range defaults {
		if *d.d <= 0 {
			*d.d = kit.Duration(d.v)
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
			b, err := safefile.Read(kit.Resolve(dir, c.SecretFile), 4096)
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
	sk      signingKey
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

// Stats counts what the provider issued.
type Stats struct {
	// AccessTokens and Refreshes count what the provider issued.
	AccessTokens int `json:"accessTokens"`
	Refreshes    int `json:"refreshes"`
	// RefreshReuses counts spent one-time refresh tokens presented again
	// (each revoked its sign-in's grant): a client that sends one is
	// signing its user out.
	RefreshReuses int `json:"refreshReuses"`
	// Revocations counts the refresh tokens revoked (RFC 7009).
	Revocations int `json:"revocations"`
}

// Side is the identity provider.
type Side struct {
	env *kit.Env
	dir *directory.Directory
	cfg Config

	mu        sync.Mutex
	idp       *idp
	nextSweep time.Time
	stats     Stats
}

// New is the provider over dir; its signing key is made when first
// needed (signingKey).
func New(env *kit.Env, dir *directory.Directory, cfg Config) *Side {
	return &Side{env: env, dir: dir, cfg: cfg, idp: newIDP()}
}

// Stats returns a copy of the provider's counts.
func (s *Side) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

func newIDP() *idp {
	return &idp{codes: map[string]*authCode{}, devices: map[string]*deviceGrant{},
		access: map[string]grant{}, refresh: map[string]grant{}}
}

// signingKey is the provider's RS256 key, made when an ID token or the
// key set is first asked for: an emulator that never serves OpenID
// Connect makes none (a 2048-bit RSA key took most of an emulator's
// start, and seconds of CPU under the race detector in the tests that
// start hundreds).
type signingKey struct {
	once sync.Once
	// generate makes the key (nil: a 2048-bit RSA key; a test's waits).
	generate func() (*rsa.PrivateKey, error)
	key      *rsa.PrivateKey
	kid      string
	signer   jose.Signer
	err      error
}

func (k *signingKey) get() (*signingKey, error) {
	k.once.Do(func() {
		generate := k.generate
		if generate == nil {
			generate = func() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) }
		}
		if k.key, k.err = generate(); k.err != nil {
			return
		}
		k.kid = kit.RandomHex(8)
		k.signer, k.err = jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: k.key, KeyID: k.kid}},
			(&jose.SignerOptions{}).WithType("JWT"))
	})
	return k, k.err
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
	kit.WriteJSON(w, http.StatusOK, v)
}

// Route serves the identity provider's endpoints; ok is false for
// other paths.
func (s *Side) Route(w http.ResponseWriter, r *http.Request) (ok bool) {
	routes := map[string]http.HandlerFunc{
		"GET /.well-known/openid-configuration":      s.discovery,
		"GET /.well-known/openid-configuration/jwks": s.jwks,
		"GET /connect/authorize":                     s.authorizePage,
		"POST /connect/authorize":                    s.authorizeSubmit,
		"POST /connect/deviceauthorization":          s.deviceAuthorization,
		"GET /device":                                s.devicePage,
		"POST /device":                               s.deviceSubmit,
		"POST /connect/token":                        s.token,
		"POST /connect/revocation":                   s.revocation,
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
	if s.env.TakeFault(w, r, r.URL.Path, kit.CodeJSON) {
		return true
	}
	h(w, r)
	return true
}

func (s *Side) discovery(w http.ResponseWriter, r *http.Request) {
	if s.cfg.NoDiscovery {
		http.NotFound(w, r)
		return
	}
	base := s.env.URL()
	kit.WriteJSON(w, http.StatusOK, map[string]any{
		"issuer":                                base,
		"authorization_endpoint":                base + "/connect/authorize",
		"token_endpoint":                        base + "/connect/token",
		"device_authorization_endpoint":         base + "/connect/deviceauthorization",
		"userinfo_endpoint":                     base + "/connect/userinfo",
		"revocation_endpoint":                   base + "/connect/revocation",
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

func (s *Side) jwks(w http.ResponseWriter, r *http.Request) {
	k, err := s.idp.sk.get()
	if err != nil {
		oidcError(w, http.StatusInternalServerError, "server_error", "no signing key: "+err.Error())
		return
	}
	kit.WriteJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &k.key.PublicKey, KeyID: k.kid, Algorithm: string(jose.RS256), Use: "sig"}}})
}

// client authenticates the calling application: client_id and
// client_secret in the form body, or HTTP Basic, or both when they agree.
func (s *Side) client(r *http.Request) (*Client, bool) {
	id, secret := r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	if bid, bsecret, ok := r.BasicAuth(); ok {
		bid, _ = url.QueryUnescape(bid)
		bsecret, _ = url.QueryUnescape(bsecret)
		if (id != "" && id != bid) || (secret != "" && secret != bsecret) {
			return nil, true
		}
		id, secret = bid, bsecret
	}
	for i := range s.cfg.Clients {
		c := &s.cfg.Clients[i]
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
func (s *Side) formClient(w http.ResponseWriter, r *http.Request) *Client {
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

func (s *Side) clientByID(id string) *Client {
	for i := range s.cfg.Clients {
		if s.cfg.Clients[i].ID == id {
			return &s.cfg.Clients[i]
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

// BearerPrefix starts a business call's Authorization of this side.
const BearerPrefix = "Bearer "

// User is the business API's check of a Bearer header: the user behind a
// valid access token, or a 401 refusal.
func (s *Side) User(header string) (string, *kit.Refusal) {
	g, ok := s.bearer(header)
	if !ok {
		return "", kit.Refuse(http.StatusUnauthorized, kit.CodeInvalidAuthToken, "Invalid or expired access token")
	}
	return g.user, nil
}
