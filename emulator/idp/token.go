package idp

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/signagent/signagent/emulator/kit"
)

// token is POST /connect/token for the three grants.
func (s *Side) token(w http.ResponseWriter, r *http.Request) {
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

func (s *Side) reject(code string) { s.env.Reject(code) }

func (s *Side) redeemCode(c *Client, f url.Values) (grant, string, string) {
	now := s.env.Now()
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

func (s *Side) redeemRefresh(c *Client, rt string) (grant, string, string) {
	now := s.env.Now()
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
	if s.cfg.RefreshRotation == "one-time" {
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
func (s *Side) issue(g grant, refreshing bool, oldRefresh string) (map[string]any, error) {
	// The id_token's key before the clock is read: it is made at its first
	// use (seconds of CPU under the race detector), and an id_token dated
	// before that wait could be expired on arrival when tokens live 2 s.
	var key *signingKey
	if hasScope(g.scope, "openid") {
		var err error
		if key, err = s.idp.sk.get(); err != nil {
			return nil, err
		}
	}
	now := s.env.Now()
	ttl := time.Duration(s.cfg.AccessTokenTTL)
	at := kit.RandomHex(32)
	resp := map[string]any{"access_token": strings.ToLower(at), "token_type": "Bearer",
		"expires_in": int(ttl.Seconds()), "scope": g.scope}
	s.mu.Lock()
	s.sweep(now)
	a := g
	a.expires = now.Add(ttl)
	s.idp.access[strings.ToLower(at)] = a
	if hasScope(g.scope, "offline_access") {
		rt := oldRefresh
		if !refreshing || s.cfg.RefreshRotation == "one-time" {
			rt = kit.RandomToken(32)
			rg := g
			rg.expires = now.Add(time.Duration(s.cfg.RefreshTokenTTL))
			if rg.family == "" {
				rg.family = kit.RandomHex(8) // a new sign-in
			}
			s.idp.refresh[rt] = rg
		}
		resp["refresh_token"] = rt
	}
	s.stats.AccessTokens++
	s.mu.Unlock()
	if key != nil {
		idt, err := s.idToken(key, g, now, ttl)
		if err != nil {
			return nil, err
		}
		resp["id_token"] = idt
	}
	return resp, nil
}

func (s *Side) idToken(k *signingKey, g grant, now time.Time, ttl time.Duration) (string, error) {
	claims := map[string]any{"iss": s.env.URL(), "sub": g.user, "aud": g.client, "iat": now.Unix(),
		"exp": now.Add(min(ttl, time.Hour)).Unix(), "auth_time": now.Unix()}
	if g.nonce != "" {
		claims["nonce"] = g.nonce
	}
	for _, u := range s.dir.Users {
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
	jws, err := k.signer.Sign(payload)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

func (s *Side) userinfo(w http.ResponseWriter, r *http.Request) {
	g, ok := s.bearer(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		oidcError(w, http.StatusUnauthorized, "invalid_token", "")
		return
	}
	info := map[string]any{"sub": g.user}
	for _, u := range s.dir.Users {
		if u.ID == g.user && u.Login != "" {
			info["email"] = u.Login
		}
	}
	noStoreJSON(w, info)
}

// bearer is the grant behind "Bearer <access token>", when it is valid.
func (s *Side) bearer(header string) (grant, bool) {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || tok == "" {
		return grant{}, false
	}
	now := s.env.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.idp.access[tok]
	return g, ok && now.Before(g.expires)
}

// sweep forgets expired codes, device grants and tokens, at most once
// a second; the caller holds s.mu.
func (s *Side) sweep(now time.Time) {
	if now.Before(s.nextSweep) {
		return
	}
	s.nextSweep = now.Add(time.Second)
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

// revocation serves RFC 7009's endpoint for refresh tokens: the client
// authenticates; a token of its own is revoked with every token of its
// sign-in; an unknown token is answered 200 too, as the RFC asks.
func (s *Side) revocation(w http.ResponseWriter, r *http.Request) {
	c := s.formClient(w, r)
	if c == nil {
		return
	}
	rt := r.PostForm.Get("token")
	if rt == "" {
		oidcError(w, http.StatusBadRequest, "invalid_request", "no token")
		return
	}
	s.mu.Lock()
	if g, ok := s.idp.refresh[rt]; ok && g.client == c.ID {
		for k, rg := range s.idp.refresh {
			if rg.family == g.family {
				delete(s.idp.refresh, k)
			}
		}
		s.stats.Revocations++
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}
