package idp

import (
	"crypto/rand"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/signagent/signagent/emulator/kit"
)

// The pages are plain server-rendered HTML forms: they work without
// JavaScript.
var pages = template.Must(template.New("").Parse(`
{{define "head"}}<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{{.Title}} - service emulator</title>
<style>body{font-family:sans-serif;max-width:28em;margin:3em auto}label{display:block;margin:.6em 0}input{width:100%}button{margin:.8em .5em 0 0}.error{color:#b00}</style>
</head><body><h1>{{.Title}}</h1>{{if .Error}}<p class="error" id="error">{{.Error}}</p>{{end}}{{end}}
{{define "signin"}}{{template "head" .}}
<p>Sign in to let <b id="client">{{.Client}}</b> use the service on your behalf ({{.Scope}}).</p>
<form method="post" action="/connect/authorize">
{{range $k, $v := .Hidden}}<input type="hidden" name="{{$k}}" value="{{$v}}">{{end}}
<label>Login <input name="login" id="login" autocomplete="username" value="{{.Login}}"></label>
<label>Password <input name="password" id="password" type="password" autocomplete="current-password"></label>
<button name="decision" value="allow" id="allow">Allow</button><button name="decision" value="deny" id="deny">Deny</button>
</form></body></html>{{end}}
{{define "device"}}{{template "head" .}}
<p>Enter the code your device shows, and sign in to let it use the service.</p>
<form method="post" action="/device">
<label>Code <input name="user_code" id="user_code" value="{{.UserCode}}" autocomplete="off"></label>
<label>Login <input name="login" id="login" autocomplete="username" value="{{.Login}}"></label>
<label>Password <input name="password" id="password" type="password" autocomplete="current-password"></label>
<button name="decision" value="allow" id="allow">Allow</button><button name="decision" value="deny" id="deny">Deny</button>
</form></body></html>{{end}}
{{define "done"}}{{template "head" .}}<p id="done">{{.Message}}</p></body></html>{{end}}
`))

type pageData struct {
	Title, Error, Client, Scope, Login, UserCode, Message string
	Hidden                                                map[string]string
	// RedirectOrigin is where the sign-in form's answer redirects to; the
	// page's form-action must allow it (browsers apply form-action to the
	// redirect after a form is posted).
	RedirectOrigin string
}

func render(w http.ResponseWriter, status int, name string, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'"+d.RedirectOrigin)
	w.WriteHeader(status)
	pages.ExecuteTemplate(w, name, d)
}

// authParams are the authorization request's parameters that the sign-in
// form carries along.
var authParams = []string{"client_id", "redirect_uri", "response_type", "scope", "state", "nonce", "code_challenge", "code_challenge_method"}

// checkAuthorize validates an authorization request. A bad client or
// redirect URI is shown on a page (the redirect URI cannot be trusted);
// other errors go back to the client by redirect.
func (s *Side) checkAuthorize(w http.ResponseWriter, r *http.Request, q url.Values) (*Client, bool) {
	c := s.clientByID(q.Get("client_id"))
	if c == nil {
		render(w, http.StatusBadRequest, "done", pageData{Title: "Unknown application", Message: "No application is registered with this client_id."})
		return nil, false
	}
	if !slices.Contains(c.RedirectURIs, q.Get("redirect_uri")) {
		render(w, http.StatusBadRequest, "done", pageData{Title: "Wrong redirect address", Message: "redirect_uri is not one registered for this application."})
		return nil, false
	}
	fail := func(code string) (*Client, bool) {
		s.reject(code)
		redirectBack(w, r, q, url.Values{"error": {code}})
		return nil, false
	}
	if q.Get("response_type") != "code" {
		return fail("unsupported_response_type")
	}
	if _, ok := checkScope(q.Get("scope")); !ok || !hasScope(q.Get("scope"), "openid") {
		return fail("invalid_scope")
	}
	if m := q.Get("code_challenge_method"); q.Get("code_challenge") != "" && m != "" && m != "S256" && m != "plain" {
		return fail("invalid_request")
	}
	return c, true
}

// redirectBack sends the browser to the request's redirect URI with v and
// the request's state.
func redirectBack(w http.ResponseWriter, r *http.Request, q url.Values, v url.Values) {
	u, _ := url.Parse(q.Get("redirect_uri"))
	qs := u.Query()
	for k, vals := range v {
		qs[k] = vals
	}
	if st := q.Get("state"); st != "" {
		qs.Set("state", st)
	}
	u.RawQuery = qs.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

func (s *Side) authorizePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	c, ok := s.checkAuthorize(w, r, q)
	if !ok {
		return
	}
	render(w, http.StatusOK, "signin", signinData(c, q, ""))
}

func signinData(c *Client, q url.Values, errMsg string) pageData {
	hidden := map[string]string{}
	for _, k := range authParams {
		if v := q.Get(k); v != "" {
			hidden[k] = v
		}
	}
	d := pageData{Title: "Sign in", Client: c.ID, Scope: q.Get("scope"), Hidden: hidden, Error: errMsg, Login: q.Get("login")}
	// redirect_uri is one registered for c (checkAuthorize).
	if u, err := url.Parse(q.Get("redirect_uri")); err == nil && u.Host != "" && !strings.ContainsAny(u.Host, " ;'") {
		d.RedirectOrigin = " " + u.Scheme + "://" + u.Host
	}
	return d
}

// readForm reads a page's posted form (at most 64 KiB); a form that cannot
// be read is answered with the page that says so.
func readForm(w http.ResponseWriter, r *http.Request) (url.Values, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		render(w, http.StatusBadRequest, "done", pageData{Title: "Bad request", Message: "The form could not be read."})
		return nil, false
	}
	return r.PostForm, true
}

func (s *Side) authorizeSubmit(w http.ResponseWriter, r *http.Request) {
	q, ok := readForm(w, r)
	if !ok {
		return
	}
	c, ok := s.checkAuthorize(w, r, q)
	if !ok {
		return
	}
	if q.Get("decision") != "allow" {
		s.reject("access_denied")
		redirectBack(w, r, q, url.Values{"error": {"access_denied"}})
		return
	}
	u := s.dir.CheckPassword(q.Get("login"), q.Get("password"))
	if u == nil {
		render(w, http.StatusUnauthorized, "signin", signinData(c, q, "Wrong login or password."))
		return
	}
	code := kit.RandomToken(32)
	now := s.env.Now()
	s.mu.Lock()
	s.sweep(now)
	s.idp.codes[code] = &authCode{grant: grant{client: c.ID, user: u.ID, scope: q.Get("scope"), nonce: q.Get("nonce"),
		expires: now.Add(time.Duration(s.cfg.CodeTTL))}, redirectURI: q.Get("redirect_uri"),
		challenge: q.Get("code_challenge"), method: q.Get("code_challenge_method")}
	s.mu.Unlock()
	redirectBack(w, r, q, url.Values{"code": {code}})
}

// deviceAuthorization is POST /connect/deviceauthorization.
func (s *Side) deviceAuthorization(w http.ResponseWriter, r *http.Request) {
	c := s.formClient(w, r)
	if c == nil {
		return
	}
	scope := r.PostForm.Get("scope")
	if bad, ok := checkScope(scope); !ok {
		s.reject("invalid_scope")
		oidcError(w, http.StatusBadRequest, "invalid_scope", bad)
		return
	}
	now := s.env.Now()
	dc, uc := kit.RandomToken(32), userCode()
	interval, life := time.Duration(s.cfg.DeviceInterval), time.Duration(s.cfg.DeviceExpiresIn)
	s.mu.Lock()
	s.sweep(now)
	s.idp.devices[dc] = &deviceGrant{grant: grant{client: c.ID, scope: scope, expires: now.Add(life)},
		userCode: uc, status: "pending", interval: interval, lastPoll: now}
	s.mu.Unlock()
	base := s.env.URL() + "/device"
	noStoreJSON(w, map[string]any{"device_code": dc, "user_code": uc, "verification_uri": base,
		"verification_uri_complete": base + "?user-code=" + uc, "expires_in": int(life.Seconds()), "interval": int(interval.Seconds())})
}

// userCode is 8 random upper-case letters.
func userCode() string {
	b := make([]byte, 8)
	for i := range b {
		n, _ := rand.Int(rand.Reader, big.NewInt(26))
		b[i] = byte('A' + n.Int64())
	}
	return string(b)
}

// pollDevice answers a device_code poll (RFC 8628 section 3.5): a poll
// before the interval has passed since the last one (or since the code was
// issued) is slow_down, and the interval grows by 5 seconds.
func (s *Side) pollDevice(c *Client, dc string) (grant, string, string) {
	now := s.env.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.idp.devices[dc]
	switch {
	case !ok || d.client != c.ID:
		return grant{}, "invalid_grant", "unknown device_code"
	case !now.Before(d.expires):
		delete(s.idp.devices, dc)
		return grant{}, "expired_token", ""
	case now.Sub(d.lastPoll) < d.interval:
		d.lastPoll = now
		d.interval += 5 * time.Second
		return grant{}, "slow_down", ""
	}
	d.lastPoll = now
	switch d.status {
	case "denied":
		delete(s.idp.devices, dc)
		return grant{}, "access_denied", ""
	case "approved":
		delete(s.idp.devices, dc)
		return d.grant, "", ""
	}
	return grant{}, "authorization_pending", ""
}

func (s *Side) devicePage(w http.ResponseWriter, r *http.Request) {
	render(w, http.StatusOK, "device", pageData{Title: "Connect a device", UserCode: r.URL.Query().Get("user-code")})
}

func (s *Side) deviceSubmit(w http.ResponseWriter, r *http.Request) {
	f, ok := readForm(w, r)
	if !ok {
		return
	}
	uc := strings.ToUpper(strings.NewReplacer("-", "", " ", "").Replace(f.Get("user_code")))
	data := pageData{Title: "Connect a device", UserCode: f.Get("user_code"), Login: f.Get("login")}
	now := s.env.Now()
	s.mu.Lock()
	var d *deviceGrant
	for _, g := range s.idp.devices {
		if g.userCode == uc && g.status == "pending" && now.Before(g.expires) {
			d = g
		}
	}
	s.mu.Unlock()
	if d == nil {
		data.Error = "This code is unknown, used or expired."
		render(w, http.StatusBadRequest, "device", data)
		return
	}
	if f.Get("decision") != "allow" {
		s.mu.Lock()
		d.status = "denied"
		s.mu.Unlock()
		render(w, http.StatusOK, "done", pageData{Title: "Access denied", Message: "The device was not allowed. You may close this window."})
		return
	}
	u := s.dir.CheckPassword(f.Get("login"), f.Get("password"))
	if u == nil {
		data.Error = "Wrong login or password."
		render(w, http.StatusUnauthorized, "device", data)
		return
	}
	s.mu.Lock()
	d.status, d.user = "approved", u.ID
	s.mu.Unlock()
	render(w, http.StatusOK, "done", pageData{Title: "Device connected", Message: "The device may now use the service. You may close this window."})
}
