package emulator

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/signagent/signagent/envelope"
)

// Codes of the legacy scheme's answers, sent in the X-Service-ErrorCode
// header with a plain-text body. Http.Auth and Auth.RndBytesNotFound are the
// wire notes'; the others are the emulator's, where the notes give none.
const (
	CodeHTTPAuth          = "Http.Auth"
	CodeBadRequest        = "Http.BadRequest"
	CodeWrongPassword     = "Auth.WrongPassword"
	CodeUnknownCert       = "Auth.CertificateNotFound"
	CodeRndBytesNotFound  = "Auth.RndBytesNotFound"
	CodeRndBytesMismatch  = "Auth.RndBytesMismatch"
	CodeInvalidSid        = "Auth.InvalidSid"
	CodeInvalidAuthToken  = "Http.Auth.InvalidToken"
	legacyAuthenticate    = "Authenticate"
	legacyConfirm         = "AuthenticateConfirm"
	maxLegacyRequestBytes = 64 << 10
)

// ChallengeDocument is the ChallengeFault that answers certificate logins
// with faultDocument instead of a random.
const ChallengeDocument = "document"

// faultDocument is what a hostile service would have the token decrypt:
// 87 bytes that are not a random.
var faultDocument = []byte("CONFIDENTIAL: the board meets on Friday; the merger price is 41 per share. Tell nobody.")

// legacyToken is an issued authorization token.
type legacyToken struct {
	userID    string
	developer string
	expires   time.Time
}

// pendingRandom is the random a certificate login is waiting for.
type pendingRandom struct {
	random  []byte
	userID  string
	expires time.Time
}

// plainError writes the legacy scheme's error: a plain-text body and the
// code in X-Service-ErrorCode.
func plainError(w http.ResponseWriter, status int, code, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if code != "" {
		w.Header().Set(errorCodeHeader, code)
	}
	w.WriteHeader(status)
	io.WriteString(w, text)
}

// legacyRoute serves the V3 methods, whose paths the service matches
// case-insensitively; ok is false for any other path.
func (s *Server) legacyRoute(w http.ResponseWriter, r *http.Request) (ok bool) {
	var name string
	var h func(*http.Request, *Developer) (string, []byte, *refusal)
	switch {
	case strings.EqualFold(r.URL.Path, "/V3/Authenticate"):
		name, h = legacyAuthenticate, s.v3Authenticate
	case strings.EqualFold(r.URL.Path, "/V3/AuthenticateConfirm"):
		name, h = legacyConfirm, s.v3Confirm
	default:
		return false
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		plainError(w, http.StatusMethodNotAllowed, CodeBadRequest, "Method not allowed")
		return true
	}
	if s.takeFault(w, r, name) {
		return true
	}
	log := s.log.With().Str("call", name).Logger()
	var ref *refusal
	var ctype string
	var body []byte
	dev := s.developerOf(r.Header.Get("Authorization"))
	if dev == nil {
		ref = refuse(http.StatusUnauthorized, CodeHTTPAuth, "Invalid API client id")
	} else {
		ctype, body, ref = h(r, dev)
	}
	if ref != nil {
		s.mu.Lock()
		s.stats.Rejections[ref.code]++
		s.mu.Unlock()
		log.Warn().Int("status", ref.status).Str("code", ref.code).Str("reason", ref.why).Msg("rejected")
		plainError(w, ref.status, ref.code, ref.why)
		return true
	}
	w.Header().Set("Content-Type", ctype)
	w.Write(body)
	return true
}

// developerOf finds the developer whose key the Authenticate header names.
func (s *Server) developerOf(header string) *Developer {
	a, ok := parseServiceAuth(header)
	if !ok {
		return nil
	}
	return s.developerByKey(a.key)
}

// developerByKey finds the developer with this key (compared in constant
// time).
func (s *Server) developerByKey(key string) *Developer {
	for i := range s.cfg.Developers {
		if subtle.ConstantTimeCompare([]byte(s.cfg.Developers[i].Key), []byte(key)) == 1 {
			return &s.cfg.Developers[i]
		}
	}
	return nil
}

// v3Authenticate is POST /V3/Authenticate?type=password|certificate|sid.
func (s *Server) v3Authenticate(r *http.Request, dev *Developer) (string, []byte, *refusal) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxLegacyRequestBytes+1))
	if err != nil || len(body) > maxLegacyRequestBytes {
		return "", nil, refuse(http.StatusBadRequest, CodeBadRequest, "Could not read the request body")
	}
	switch t := r.URL.Query().Get("type"); strings.ToLower(t) {
	case "":
		return "", nil, refuse(http.StatusBadRequest, CodeBadRequest, "Query parameter 'type' is required")
	case "password":
		return s.byPassword(body, dev)
	case "sid":
		return s.bySid(body, dev)
	case "certificate":
		return s.byCertificate(body)
	default:
		return "", nil, refuse(http.StatusBadRequest, CodeBadRequest, "Unknown authentication type")
	}
}

func (s *Server) byPassword(body []byte, dev *Developer) (string, []byte, *refusal) {
	var in struct {
		Login    *string `json:"login"`
		Password *string `json:"password"`
	}
	if json.Unmarshal(body, &in) != nil || in.Login == nil || in.Password == nil {
		return "", nil, refuse(http.StatusBadRequest, CodeBadRequest, "Could not deserialize the request body: want {\"login\",\"password\"}")
	}
	user := s.checkPassword(*in.Login, *in.Password)
	if user == nil {
		return "", nil, refuse(http.StatusUnauthorized, CodeWrongPassword, "Wrong password provided for login")
	}
	return s.issueToken(user.ID, dev)
}

// dummyHash is a bcrypt hash of nothing anyone sends.
const dummyHash = "$2a$10$heWFk5pFmokP/qjD3GUG0OUnCCDy4xw5TZ5zSkwLHJvcERaIjxkvG"

func (s *Server) bySid(body []byte, dev *Developer) (string, []byte, *refusal) {
	sid := strings.TrimSpace(string(body))
	if sid == "" {
		return "", nil, refuse(http.StatusBadRequest, CodeBadRequest, "The request body must be the auth.sid")
	}
	now := s.clock()
	s.mu.Lock()
	rec, ok := s.sids[sid]
	s.mu.Unlock()
	if !ok || !now.Before(rec.Created.Add(time.Duration(s.cfg.SidTTL))) {
		return "", nil, refuse(http.StatusUnauthorized, CodeInvalidSid, "Invalid or expired auth.sid")
	}
	return s.issueToken(rec.UserID, dev)
}

func (s *Server) byCertificate(body []byte) (string, []byte, *refusal) {
	cert, err := x509.ParseCertificate(body)
	if err != nil {
		return "", nil, refuse(http.StatusBadRequest, CodeBadRequest, "Could not deserialize certificate from the request body")
	}
	if _, ok := cert.PublicKey.(*rsa.PublicKey); !ok {
		return "", nil, refuse(http.StatusBadRequest, CodeBadRequest, "The emulator encrypts to RSA certificates only")
	}
	thumb := thumbprint(cert.Raw)
	user := s.userByThumbprint(thumb)
	if user == nil {
		return "", nil, refuse(http.StatusUnauthorized, CodeUnknownCert, "Certificate is not registered for any user")
	}
	random := make([]byte, 32)
	rand.Read(random)
	if s.cfg.ChallengeFault == ChallengeDocument {
		random = append([]byte{}, faultDocument...)
	}
	env, err := envelope.Seal(random, cert, s.cfg.OAEP)
	if err != nil {
		return "", nil, refuse(http.StatusInternalServerError, CodeInternal, "could not encrypt: "+err.Error())
	}
	now := s.clock()
	s.mu.Lock()
	s.sweepLegacy(now)
	// One pending random per certificate: a new login replaces the last.
	s.randoms[thumb] = &pendingRandom{random: random, userID: user.ID, expires: now.Add(time.Duration(s.cfg.ChallengeTTL))}
	s.stats.LegacyChallenges++
	s.mu.Unlock()
	return "application/octet-stream", env, nil
}

// v3Confirm is POST /V3/AuthenticateConfirm?thumbprint=&token=: the
// random of a certificate login, decrypted and base64-encoded.
func (s *Server) v3Confirm(r *http.Request, dev *Developer) (string, []byte, *refusal) {
	q := r.URL.Query()
	thumb := strings.ToUpper(strings.TrimSpace(q.Get("thumbprint")))
	if thumb == "" {
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxLegacyRequestBytes))
		cert, err := x509.ParseCertificate(body)
		if err != nil {
			return "", nil, refuse(http.StatusBadRequest, CodeBadRequest, "Give the thumbprint parameter or the DER certificate as the body")
		}
		thumb = thumbprint(cert.Raw)
	}
	if b, err := hex.DecodeString(thumb); err != nil || len(b) != sha1.Size {
		return "", nil, refuse(http.StatusBadRequest, CodeBadRequest, "The thumbprint must be 40 hexadecimal digits")
	}
	if !q.Has("token") {
		return "", nil, refuse(http.StatusBadRequest, CodeBadRequest, "Query parameter 'token' is required")
	}
	// A token percent-encoded twice arrives here with '%' in it: not base64.
	got, err := base64.StdEncoding.Strict().DecodeString(q.Get("token"))
	if err != nil {
		return "", nil, refuse(http.StatusBadRequest, CodeBadRequest, "Could not decode token: it must be base64, percent-encoded once")
	}
	now := s.clock()
	s.mu.Lock()
	p, ok := s.randoms[thumb]
	delete(s.randoms, thumb) // single-use: any attempt spends it
	s.mu.Unlock()
	switch {
	case !ok || !now.Before(p.expires):
		return "", nil, refuse(http.StatusForbidden, CodeRndBytesNotFound, "Random bytes not found for this certificate")
	case subtle.ConstantTimeCompare(got, p.random) != 1:
		return "", nil, refuse(http.StatusUnauthorized, CodeRndBytesMismatch, "The decrypted token does not match")
	}
	return s.issueToken(p.userID, dev)
}

// issueToken makes a random token for user: 128 bytes, standard base64
// (172 characters ending in '=', as the service's are). A new token does
// not revoke older ones.
func (s *Server) issueToken(userID string, dev *Developer) (string, []byte, *refusal) {
	b := make([]byte, 128)
	rand.Read(b)
	tok := base64.StdEncoding.EncodeToString(b)
	now := s.clock()
	s.mu.Lock()
	s.sweepLegacy(now)
	s.tokens[tok] = legacyToken{userID: userID, developer: dev.Name, expires: now.Add(time.Duration(s.cfg.TokenTTL))}
	s.stats.LegacyTokens++
	s.mu.Unlock()
	s.log.Info().Str("developer", dev.Name).Str("user", userID).Msg("legacy token issued")
	return "text/plain; charset=utf-8", []byte(tok), nil
}

// legacyUser is the access check of section 5.4 for the legacy scheme:
// the user behind a business call's header, or a 401 refusal.
func (s *Server) legacyUser(header string) (string, *refusal) {
	a, ok := parseServiceAuth(header)
	if !ok {
		return "", refuse(http.StatusUnauthorized, CodeHTTPAuth, "Invalid authorization header")
	}
	tok := a.token
	if s.developerByKey(a.key) == nil {
		return "", refuse(http.StatusUnauthorized, CodeHTTPAuth, "Invalid API client id")
	}
	if tok == "" {
		return "", refuse(http.StatusUnauthorized, CodeInvalidAuthToken, "Invalid auth token")
	}
	now := s.clock()
	s.mu.Lock()
	rec, ok := s.tokens[tok]
	s.mu.Unlock()
	if !ok || !now.Before(rec.expires) {
		return "", refuse(http.StatusUnauthorized, CodeInvalidAuthToken, "Invalid auth token")
	}
	return rec.userID, nil
}

// sweepLegacy forgets expired tokens and randoms, at most once a second;
// the caller holds s.mu.
func (s *Server) sweepLegacy(now time.Time) {
	if now.Before(s.nextLegacySweep) {
		return
	}
	s.nextLegacySweep = now.Add(time.Second)
	for k, t := range s.tokens {
		if !now.Before(t.expires) {
			delete(s.tokens, k)
		}
	}
	for k, p := range s.randoms {
		if !now.Before(p.expires) {
			delete(s.randoms, k)
		}
	}
}

func (s *Server) userByThumbprint(thumb string) *User {
	for i := range s.cfg.Users {
		for _, t := range s.cfg.Users[i].Thumbprints {
			if strings.EqualFold(t, thumb) {
				return &s.cfg.Users[i]
			}
		}
	}
	return nil
}

func thumbprint(der []byte) string {
	sum := sha1.Sum(der)
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

// HashPassword makes the passwordHash of a user in the configuration.
func HashPassword(password []byte) (string, error) {
	h, err := bcrypt.GenerateFromPassword(bytes.TrimRight(password, "\r\n"), bcrypt.DefaultCost)
	return string(h), err
}
