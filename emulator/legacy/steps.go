package legacy

import (
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

	"github.com/signagent/signagent/emulator/directory"
	"github.com/signagent/signagent/emulator/kit"
	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/internal/gost"
)

// ChallengeDocument is the ChallengeFault that answers certificate logins
// with FaultDocument instead of a random.
const ChallengeDocument = "document"

// FaultDocument is what a hostile service would have the token decrypt:
// 87 bytes that are not a random.
var FaultDocument = []byte("CONFIDENTIAL: the board meets on Friday; the merger price is 41 per share. Tell nobody.")

// Route serves the V3 methods, whose paths the service matches
// case-insensitively; ok is false for any other path.
func (s *Side) Route(w http.ResponseWriter, r *http.Request) (ok bool) {
	var name string
	var h func(*http.Request, *Developer) (string, []byte, *kit.Refusal)
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
		kit.PlainError(w, http.StatusMethodNotAllowed, kit.CodeBadRequest, "Method not allowed")
		return true
	}
	if s.env.TakeFault(w, r, name, kit.PlainFault) {
		return true
	}
	log := s.env.Log.With().Str("call", name).Logger()
	var ref *kit.Refusal
	var ctype string
	var body []byte
	dev := s.developerOf(r.Header.Get("Authorization"))
	if dev == nil {
		ref = kit.Refuse(http.StatusUnauthorized, kit.CodeHTTPAuth, "Invalid API client id")
	} else {
		ctype, body, ref = h(r, dev)
	}
	if ref != nil {
		s.env.Reject(ref.Code)
		log.Warn().Int("status", ref.Status).Str("code", ref.Code).Str("reason", ref.Why).Msg("rejected")
		kit.PlainError(w, ref.Status, ref.Code, ref.Why)
		return true
	}
	w.Header().Set("Content-Type", ctype)
	w.Write(body)
	return true
}

// developerOf finds the developer whose key the Authenticate header names.
func (s *Side) developerOf(header string) *Developer {
	a, ok := parseServiceAuth(header)
	if !ok {
		return nil
	}
	return s.developerByKey(a.key)
}

// developerByKey finds the developer with this key (compared in constant
// time).
func (s *Side) developerByKey(key string) *Developer {
	for i := range s.cfg.Developers {
		if subtle.ConstantTimeCompare([]byte(s.cfg.Developers[i].Key), []byte(key)) == 1 {
			return &s.cfg.Developers[i]
		}
	}
	return nil
}

// v3Authenticate is POST /V3/Authenticate?type=password|certificate|sid.
func (s *Side) v3Authenticate(r *http.Request, dev *Developer) (string, []byte, *kit.Refusal) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxLegacyRequestBytes+1))
	if err != nil || len(body) > maxLegacyRequestBytes {
		return "", nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "Could not read the request body")
	}
	switch t := r.URL.Query().Get("type"); strings.ToLower(t) {
	case "":
		return "", nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "Query parameter 'type' is required")
	case "password":
		return s.byPassword(body, dev)
	case "sid":
		return s.bySid(body, dev)
	case "certificate":
		return s.byCertificate(body)
	default:
		return "", nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "Unknown authentication type")
	}
}

func (s *Side) byPassword(body []byte, dev *Developer) (string, []byte, *kit.Refusal) {
	var in struct {
		Login    *string `json:"login"`
		Password *string `json:"password"`
	}
	if json.Unmarshal(body, &in) != nil || in.Login == nil || in.Password == nil {
		return "", nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "Could not deserialize the request body: want {\"login\",\"password\"}")
	}
	user := s.dir.CheckPassword(*in.Login, *in.Password)
	if user == nil {
		return "", nil, kit.Refuse(http.StatusUnauthorized, CodeWrongPassword, "Wrong password provided for login")
	}
	return s.issueToken(user.ID, dev)
}

func (s *Side) bySid(body []byte, dev *Developer) (string, []byte, *kit.Refusal) {
	sid := strings.TrimSpace(string(body))
	if sid == "" {
		return "", nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "The request body must be the auth.sid")
	}
	user, ok := s.sidUser(sid)
	if !ok {
		return "", nil, kit.Refuse(http.StatusUnauthorized, CodeInvalidSid, "Invalid or expired auth.sid")
	}
	return s.issueToken(user, dev)
}

func (s *Side) byCertificate(body []byte) (string, []byte, *kit.Refusal) {
	cert, err := x509.ParseCertificate(body)
	if err != nil {
		return "", nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "Could not deserialize certificate from the request body")
	}
	// RSA, or GOST R 34.10-2012 as the service's qualified certificates
	// are: sealed with CryptoPro key transport and the configured content
	// S-box.
	_, isRSA := cert.PublicKey.(*rsa.PublicKey)
	if !isRSA {
		if _, err := gost.PublicKeyOf(cert); err != nil {
			return "", nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "The emulator encrypts to RSA and GOST R 34.10-2012 certificates only ("+err.Error()+")")
		}
	}
	thumb := directory.Thumbprint(cert.Raw)
	user := s.dir.UserByThumbprint(thumb)
	if user == nil {
		return "", nil, kit.Refuse(http.StatusUnauthorized, CodeUnknownCert, "Certificate is not registered for any user")
	}
	random := make([]byte, 32)
	rand.Read(random)
	if s.cfg.ChallengeFault == ChallengeDocument {
		random = append([]byte{}, FaultDocument...)
	}
	var env []byte
	if isRSA {
		env, err = envelope.Seal(random, cert, s.cfg.OAEP)
	} else {
		env, err = envelope.SealGOST(random, cert, gost.SBoxByName(s.cfg.GOSTContentSBox))
	}
	if err != nil {
		return "", nil, kit.Refuse(http.StatusInternalServerError, kit.CodeInternal, "could not encrypt: "+err.Error())
	}
	now := s.env.Now()
	s.mu.Lock()
	s.sweep(now)
	// One pending random per certificate: a new login replaces the last.
	s.randoms[thumb] = &pendingRandom{random: random, userID: user.ID, expires: now.Add(time.Duration(s.cfg.ChallengeTTL))}
	s.stats.Challenges++
	s.mu.Unlock()
	return "application/octet-stream", env, nil
}

// v3Confirm is POST /V3/AuthenticateConfirm?thumbprint=&token=: the
// random of a certificate login, decrypted and base64-encoded.
func (s *Side) v3Confirm(r *http.Request, dev *Developer) (string, []byte, *kit.Refusal) {
	q := r.URL.Query()
	thumb := strings.ToUpper(strings.TrimSpace(q.Get("thumbprint")))
	if thumb == "" {
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxLegacyRequestBytes))
		cert, err := x509.ParseCertificate(body)
		if err != nil {
			return "", nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "Give the thumbprint parameter or the DER certificate as the body")
		}
		thumb = directory.Thumbprint(cert.Raw)
	}
	if b, err := hex.DecodeString(thumb); err != nil || len(b) != sha1.Size {
		return "", nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "The thumbprint must be 40 hexadecimal digits")
	}
	if !q.Has("token") {
		return "", nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "Query parameter 'token' is required")
	}
	// A token percent-encoded twice arrives here with '%' in it: not base64.
	got, err := base64.StdEncoding.Strict().DecodeString(q.Get("token"))
	if err != nil {
		return "", nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "Could not decode token: it must be base64, percent-encoded once")
	}
	now := s.env.Now()
	s.mu.Lock()
	p, ok := s.randoms[thumb]
	delete(s.randoms, thumb) // single-use: any attempt spends it
	s.mu.Unlock()
	switch {
	case !ok || !now.Before(p.expires):
		return "", nil, kit.Refuse(http.StatusForbidden, CodeRndBytesNotFound, "Random bytes not found for this certificate")
	case subtle.ConstantTimeCompare(got, p.random) != 1:
		return "", nil, kit.Refuse(http.StatusUnauthorized, CodeRndBytesMismatch, "The decrypted token does not match")
	}
	return s.issueToken(p.userID, dev)
}

// issueToken makes a random token for user: 128 bytes, standard base64
// (172 characters ending in '=', as the service's are). A new token does
// not revoke older ones.
func (s *Side) issueToken(userID string, dev *Developer) (string, []byte, *kit.Refusal) {
	b := make([]byte, 128)
	rand.Read(b)
	tok := base64.StdEncoding.EncodeToString(b)
	now := s.env.Now()
	s.mu.Lock()
	s.sweep(now)
	s.tokens[tok] = legacyToken{userID: userID, developer: dev.Name, expires: now.Add(time.Duration(s.cfg.TokenTTL))}
	s.stats.Tokens++
	s.mu.Unlock()
	s.env.Log.Info().Str("developer", dev.Name).Str("user", userID).Msg("legacy token issued")
	return "text/plain; charset=utf-8", []byte(tok), nil
}

// User is the access check of section 5.4 for the legacy scheme:
// the user behind a business call's header, or a 401 refusal.
func (s *Side) User(header string) (string, *kit.Refusal) {
	a, ok := parseServiceAuth(header)
	if !ok {
		return "", kit.Refuse(http.StatusUnauthorized, kit.CodeHTTPAuth, "Invalid authorization header")
	}
	tok := a.token
	if s.developerByKey(a.key) == nil {
		return "", kit.Refuse(http.StatusUnauthorized, kit.CodeHTTPAuth, "Invalid API client id")
	}
	if tok == "" {
		return "", kit.Refuse(http.StatusUnauthorized, kit.CodeInvalidAuthToken, "Invalid auth token")
	}
	now := s.env.Now()
	s.mu.Lock()
	rec, ok := s.tokens[tok]
	s.mu.Unlock()
	if !ok || !now.Before(rec.expires) {
		return "", kit.Refuse(http.StatusUnauthorized, kit.CodeInvalidAuthToken, "Invalid auth token")
	}
	return rec.userID, nil
}

// sweep forgets expired tokens and randoms, at most once a second;
// the caller holds s.mu.
func (s *Side) sweep(now time.Time) {
	if now.Before(s.nextSweep) {
		return
	}
	s.nextSweep = now.Add(time.Second)
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
