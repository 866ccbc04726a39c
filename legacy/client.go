package legacy

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/internal/httpx"
)

// Method is how a user authenticates: the type parameter of Authenticate.
type Method string

// The three ways in.
const (
	ByPassword    Method = "password"
	ByCertificate Method = "certificate"
	BySid         Method = "sid"
)

// ParseMethod reads a --by value.
func ParseMethod(s string) (Method, error) {
	switch m := Method(strings.ToLower(strings.TrimSpace(s))); m {
	case ByPassword, ByCertificate, BySid:
		return m, nil
	}
	return "", fmt.Errorf("%w: %q is not a way to authenticate: want password, certificate or sid", errdefs.ErrInvalidInput, s)
}

// DefaultTokenTTL is how long the service keeps a token valid.
const DefaultTokenTTL = 24 * time.Hour

// maxAnswer bounds what is read of any answer: a token is about 172 bytes,
// an envelope holding a random well under 4 KiB.
const maxAnswer = 64 << 10

// Config configures a Client.
type Config struct {
	// APIURL is the service's business address; Authenticate is at
	// APIURL/V3/Authenticate. https unless the host is loopback or
	// AllowInsecureHTTP is set.
	APIURL            string
	AllowInsecureHTTP bool
	// DeveloperKey is the integrator's key (secret).
	DeveloperKey string
	// TokenTTL is how long a token is taken to live after it was issued
	// (default 24h, the service's figure).
	TokenTTL time.Duration
	// ChallengeSize is the length of the random a certificate login's
	// challenge holds, the only length the token is asked to open
	// (default envelope.ChallengeSize, 32 bytes, as the emulator sends;
	// another only where a real service's capture shows it).
	ChallengeSize int
	// Guard keeps what certificate logins remember between them (see
	// Guard); nil: New makes one. A client rebuilt on a reload is given
	// the old one.
	Guard *Guard
	// Settings: the HTTP client, each request's time-out, the attempts of
	// a request that failed in transport or with 5xx and the backoff
	// between them, the User-Agent and the clock, each with its default
	// (httpx.Settings). AuthenticateConfirm is tried again only when it
	// never reached the service.
	httpx.Settings
	Log zerolog.Logger
}

// Client calls Authenticate (V3) and AuthenticateConfirm (V3).
type Client struct {
	cfg   Config
	base  *url.URL
	key   string
	guard *Guard
}

// Token is an authorization token and its lifetime as the client reckons
// it (the service does not say).
type Token struct {
	Value      string
	By         Method
	ObtainedAt time.Time
	ExpiresAt  time.Time
}

// New checks the configuration and returns a client.
func New(cfg Config) (*Client, error) {
	u, err := ParseAPIURL(cfg.APIURL, cfg.AllowInsecureHTTP)
	if err != nil {
		return nil, err
	}
	key, err := CheckDeveloperKey(cfg.DeveloperKey)
	if err != nil {
		return nil, err
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	if cfg.ChallengeSize == 0 {
		cfg.ChallengeSize = envelope.ChallengeSize
	}
	if cfg.ChallengeSize < envelope.MinChallengeSize || cfg.ChallengeSize > envelope.MaxChallengeSize {
		return nil, fmt.Errorf("%w: a certificate login's challenge size of %d bytes: from %d to %d (the service's is %d)",
			errdefs.ErrInvalidInput, cfg.ChallengeSize, envelope.MinChallengeSize, envelope.MaxChallengeSize, envelope.ChallengeSize)
	}
	// A redirect would carry the developer key somewhere else: never follow.
	cfg.Settings.Fill()
	g := cfg.Guard
	if g == nil {
		g = NewGuard(0, cfg.Now)
	}
	return &Client{cfg: cfg, base: u, key: key, guard: g}, nil
}

// ParseAPIURL checks the service's business address: https (plain http
// only to loopback, or when allowed), no user info, query or fragment.
func ParseAPIURL(raw string, allowHTTP bool) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, fmt.Errorf("%w: no service API URL: give --business-url or set SIGNAGENT_BUSINESS_URL", errdefs.ErrInvalidInput)
	}
	u, err := httpx.ParseBaseURL(raw, allowHTTP)
	if err != nil {
		return nil, fmt.Errorf("%w: API %w", errdefs.ErrInvalidInput, err)
	}
	return u, nil
}

// CheckDeveloperKey trims a developer key (one trailing newline, as a file
// has) and refuses one that cannot go into the header: empty, with white
// space, a comma, or a control character. The key is never in the error.
func CheckDeveloperKey(key string) (string, error) {
	key = strings.TrimSuffix(strings.TrimSuffix(key, "\n"), "\r")
	if key == "" {
		return "", fmt.Errorf("%w: the developer key is empty: set SIGNAGENT_DEVELOPER_KEY or give --developer-key-file", ErrDeveloperKey)
	}
	if len(key) > 512 {
		return "", fmt.Errorf("%w: the developer key is %d bytes long; a key is a short opaque string", ErrDeveloperKey, len(key))
	}
	for _, r := range key {
		if r <= ' ' || r == ',' || r == 0x7f || r > 0x7e {
			return "", fmt.Errorf("%w: the developer key holds white space, a comma or a character outside printable ASCII", ErrDeveloperKey)
		}
	}
	return key, nil
}

// Header is the business call's header value for a token of this client.
func (c *Client) Header(token string) string { return Header(c.key, token) }

// Password authenticates by login and password.
func (c *Client) Password(ctx context.Context, login, password string) (Token, error) {
	if strings.TrimSpace(login) == "" {
		return Token{}, fmt.Errorf("%w: no login: give --login", errdefs.ErrInvalidInput)
	}
	if password == "" {
		return Token{}, fmt.Errorf("%w: the password is empty", errdefs.ErrInvalidInput)
	}
	body, err := json.Marshal(map[string]string{"login": login, "password": password})
	if err != nil {
		return Token{}, err
	}
	ans, err := c.call(ctx, callAuthenticate(ByPassword), body, "application/json", retryAlways, password)
	if err != nil {
		return Token{}, err
	}
	return c.token(ByPassword, ans)
}

// Sid exchanges an auth.sid from trusted authentication for a token.
func (c *Client) Sid(ctx context.Context, sid string) (Token, error) {
	sid = strings.TrimSpace(sid)
	if sid == "" || strings.ContainsFunc(sid, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return Token{}, fmt.Errorf("%w: the auth.sid is empty or holds white space or control characters", errdefs.ErrInvalidInput)
	}
	ans, err := c.call(ctx, callAuthenticate(BySid), []byte(sid), "text/plain", retryAlways, sid)
	if err != nil {
		return Token{}, err
	}
	return c.token(BySid, ans)
}

// Certificate authenticates with the certificate of a key that can
// decrypt: the service answers an EnvelopedData holding a random encrypted
// to cert; key (on the token) opens it; AuthenticateConfirm sends the
// random back and answers the token. The private key never leaves key.
func (c *Client) Certificate(ctx context.Context, cert *x509.Certificate, key crypto.Decrypter) (Token, error) {
	if cert == nil || key == nil {
		return Token{}, fmt.Errorf("%w: certificate login needs the key's certificate", errdefs.ErrInvalidInput)
	}
	// A key that cannot open the challenge (an RSA key that may not
	// decrypt, a GOST key on a token without the mechanisms) is refused
	// before the service is asked for a challenge it could not answer.
	if err := envelope.CanOpen(cert, withContext(ctx, key)); err != nil {
		return Token{}, err
	}
	rec := CertLogin{Thumbprint: canonical.ThumbprintOf(cert)}
	start := time.Now()
	defer func() {
		rec.Latency = time.Since(start)
		c.guard.report(rec)
	}()
	if err := c.guard.await(ctx, rec.Thumbprint); err != nil {
		rec.Outcome = CertBackoff
		return Token{}, err
	}
	env, err := c.call(ctx, callAuthenticate(ByCertificate), cert.Raw, "application/octet-stream", retryAlways, "")
	if err != nil {
		rec.Outcome = CertError
		return Token{}, err
	}
	tok, err := c.answer(ctx, env, cert, key, &rec)
	switch rec.Outcome {
	case CertOK:
		c.guard.succeeded(rec.Thumbprint)
	case CertUnverified:
		// The token was not asked: nothing to slow down.
	default:
		c.guard.failed(rec.Thumbprint)
	}
	return tok, err
}

// Guard returns what the client's certificate logins remember, to hand on
// to a client that replaces it.
func (c *Client) Guard() *Guard { return c.guard }

// answer answers the service's challenge env: it is read (envelope.Read:
// a random of the configured length, nothing else), its key transport
// refused if it was opened before, opened by key on the token, and its
// random sent to AuthenticateConfirm. rec gets the transport's hash and
// the outcome.
func (c *Client) answer(ctx context.Context, env []byte, cert *x509.Certificate, key crypto.Decrypter, rec *CertLogin) (Token, error) {
	step := callAuthenticate(ByCertificate).name
	ch, err := envelope.Read(env, cert, c.cfg.ChallengeSize)
	if err != nil {
		rec.Outcome = CertNotChallenge
		return Token{}, fmt.Errorf("%s: the service's challenge: %w", step, err)
	}
	id := ch.TransportID()
	rec.Transport = hex.EncodeToString(id[:16])
	if err := c.guard.first(ctx, id); err != nil {
		rec.Outcome = outcomeOf(err)
		return Token{}, fmt.Errorf("%s: %w", step, err)
	}
	random, err := ch.Open(withContext(ctx, key))
	if err != nil {
		rec.Outcome = CertNotOpened
		return Token{}, fmt.Errorf("%s: the service's challenge: %w", step, err)
	}
	defer clear(random)
	encoded := base64.StdEncoding.EncodeToString(random)
	q := url.Values{"thumbprint": {rec.Thumbprint}, "token": {encoded}}
	ans, err := c.call(ctx, apiCall{name: "AuthenticateConfirm", path: "/V3/AuthenticateConfirm", query: q.Encode()},
		nil, "", retryUnsent, encoded)
	if err != nil {
		rec.Outcome = outcomeOf(err)
		return Token{}, err
	}
	tok, err := c.token(ByCertificate, ans)
	if err != nil {
		rec.Outcome = CertError
		return Token{}, err
	}
	rec.Outcome = CertOK
	return tok, nil
}

// token reads a token answer: plain text (a JSON string is tolerated).
func (c *Client) token(by Method, body []byte) (Token, error) {
	v := strings.TrimSpace(string(body))
	if s, err := unquote(v); err == nil {
		v = s
	}
	if v == "" || len(v) > 4096 || strings.ContainsFunc(v, func(r rune) bool { return r < 0x21 || r > 0x7e || r == ',' }) {
		return Token{}, fmt.Errorf("Authenticate (V3) type=%s: the answer is not a token (empty, too long, or not printable ASCII without commas)", by)
	}
	now := c.cfg.Now().UTC()
	return Token{Value: v, By: by, ObtainedAt: now, ExpiresAt: now.Add(c.cfg.TokenTTL)}, nil
}

func unquote(s string) (string, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", errors.New("not quoted")
	}
	var v string
	err := json.Unmarshal([]byte(s), &v)
	return v, err
}

// apiCall names a request: what it is called in messages, its path below
// the API URL and its query.
type apiCall struct {
	name, path, query string
}

func callAuthenticate(by Method) apiCall {
	return apiCall{name: "Authenticate (V3) type=" + string(by), path: "/V3/Authenticate", query: "type=" + string(by)}
}

type retryPolicy int

const (
	retryAlways retryPolicy = iota // transport failures and 5xx
	retryUnsent                    // only a request that never reached the service
)

// call sends a request with the developer key alone in the header, with
// retries, and returns the 2xx answer's body. secret (the password, sid or
// random) is scrubbed from whatever the service answers in an error.
func (c *Client) call(ctx context.Context, ac apiCall, body []byte, ctype string, policy retryPolicy, secret string) ([]byte, error) {
	var ans []byte
	err := httpx.Retry(ctx, c.cfg.Attempts, c.cfg.Backoff,
		func(attempt int, d time.Duration, err error) {
			c.cfg.Log.Warn().Str("call", ac.name).Int("attempt", attempt).Stringer("wait", d).Err(err).Msg("request failed; retrying")
		},
		func(int) (bool, time.Duration, error) {
			var sent bool
			var err error
			ans, sent, err = c.once(ctx, ac, body, ctype, secret)
			var se *ServiceError
			var te *httpx.TransportError
			switch {
			case err == nil:
				return false, 0, nil
			case policy == retryUnsent:
				return errors.As(err, &te) && !sent, 0, err
			case errors.As(err, &se):
				return se.Temporary(), se.RetryAfter, err
			}
			return errors.As(err, &te), 0, err
		})
	if err != nil {
		return nil, err
	}
	return ans, nil
}

func (c *Client) once(ctx context.Context, ac apiCall, body []byte, ctype, secret string) ([]byte, bool, error) {
	u := *c.base
	u.Path = c.base.Path + ac.path
	u.RawQuery = ac.query
	shown := u.Scheme + "://" + u.Host + u.Path // the query may carry the random
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var sent bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent = true }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, false, fmt.Errorf("%s: could not build the request for %s", ac.name, shown)
	}
	req.Header.Set("Authorization", AuthenticateHeader(c.key))
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	start := time.Now()
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, sent, &httpx.TransportError{Step: ac.name, URL: shown, Timeout: httpx.IsTimeout(ctx, err), Err: httpx.CleanErr(err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, true, &httpx.TransportError{Step: ac.name, URL: shown, Timeout: httpx.IsTimeout(ctx, err), Err: httpx.CleanErr(err)}
	}
	ev := c.cfg.Log.Debug()
	if resp.StatusCode >= 300 {
		ev = c.cfg.Log.Info()
	}
	ev.Str("call", ac.name).Str("url", shown).Int("status", resp.StatusCode).Dur("latency", time.Since(start)).Msg("service answered")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ra, _ := httpx.RetryAfter(resp.Header, time.Now())
		return nil, true, &ServiceError{Call: ac.name, Status: resp.StatusCode, RetryAfter: ra,
			Code:    httpx.Printable(resp.Header.Get(ErrorCodeHeader), 80, c.key, secret),
			Message: httpx.Printable(string(data), 200, c.key, secret)}
	}
	if len(data) > maxAnswer {
		return nil, true, fmt.Errorf("%s: the answer is larger than %d bytes", ac.name, maxAnswer)
	}
	return data, true, nil
}

// ctxDecrypter bounds a token's decryption by the caller's context.
type ctxDecrypter struct {
	ctx context.Context
	key interface {
		crypto.Decrypter
		DecryptContext(context.Context, []byte, crypto.DecrypterOpts) ([]byte, error)
	}
}

func (d ctxDecrypter) Public() crypto.PublicKey { return d.key.Public() }
func (d ctxDecrypter) Decrypt(_ io.Reader, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	return d.key.DecryptContext(d.ctx, msg, opts)
}

// CanDecrypt passes the key's own answer on (a key that may not decrypt).
func (d ctxDecrypter) CanDecrypt() error {
	if k, ok := d.key.(interface{ CanDecrypt() error }); ok {
		return k.CanDecrypt()
	}
	return nil
}

// ctxGOSTOpener is a key that opens GOST challenges on its token, with the
// login's context (pkcs11.Key).
type ctxGOSTOpener struct {
	ctx context.Context
	key gostContextOpener
}

type gostContextOpener interface {
	crypto.Decrypter
	CanOpenGOSTContext(context.Context) error
	OpenGOSTContext(context.Context, *gost.Transport) ([]byte, error)
}

func (o ctxGOSTOpener) Public() crypto.PublicKey { return o.key.Public() }
func (o ctxGOSTOpener) Decrypt(r io.Reader, msg []byte, opts crypto.DecrypterOpts) ([]byte, error) {
	return o.key.Decrypt(r, msg, opts)
}
func (o ctxGOSTOpener) CanOpenGOST() error { return o.key.CanOpenGOSTContext(o.ctx) }
func (o ctxGOSTOpener) OpenGOST(t *gost.Transport) ([]byte, error) {
	return o.key.OpenGOSTContext(o.ctx, t)
}

// withContext bounds key's token calls by ctx: a GOST key's (which opens
// the whole challenge on the token) or an RSA key's decryption.
func withContext(ctx context.Context, key crypto.Decrypter) crypto.Decrypter {
	if k, ok := key.(gostContextOpener); ok && isGOSTKey(k) {
		return ctxGOSTOpener{ctx, k}
	}
	if k, ok := key.(interface {
		crypto.Decrypter
		DecryptContext(context.Context, []byte, crypto.DecrypterOpts) ([]byte, error)
	}); ok {
		return ctxDecrypter{ctx, k}
	}
	return key
}

// isGOSTKey says whether k is a GOST key (pkcs11.Key says so itself).
func isGOSTKey(k crypto.Decrypter) bool {
	g, ok := k.(interface{ IsGOST() bool })
	return ok && g.IsGOST()
}

// CheckKey asks the service whether it knows the developer key, changing
// nothing: Authenticate (V3) without a type, which the service answers 401
// for a key it does not know and 400 (no type) for one it does. Sent once,
// not retried. nil: known; a *ServiceError: refused or failing; else the
// service could not be reached or told nothing.
func (c *Client) CheckKey(ctx context.Context) error {
	_, err := c.call(ctx, apiCall{name: "Authenticate (V3) without a type", path: "/V3/Authenticate"}, nil, "", retryUnsent, "")
	var se *ServiceError
	switch {
	case err == nil:
		return errors.New("Authenticate (V3): the service answered a request without a type with success; whether it knows the developer key cannot be told")
	case errors.As(err, &se) && se.Status == http.StatusBadRequest:
		return nil
	}
	return err
}
