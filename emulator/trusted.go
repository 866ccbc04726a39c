package emulator

import (
	"crypto/sha256"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/signer"
)

// findUsers returns the users a credential identifies.
func (s *Server) findUsers(c canonical.Credential) []User {
	var out []User
	for _, u := range s.cfg.Users {
		switch c.Kind {
		case canonical.Phone:
			if u.Phone == c.Value {
				out = append(out, u)
			}
		case canonical.SNILS:
			if u.SNILS == c.Value {
				out = append(out, u)
			}
		case canonical.Thumbprint:
			for _, t := range u.Thumbprints {
				if t == c.Value {
					out = append(out, u)
					break
				}
			}
		}
	}
	return out
}

func (s *Server) oneUser(c canonical.Credential) (User, *refusal) {
	users := s.findUsers(c)
	switch {
	case len(users) == 0:
		return User{}, refuse(http.StatusForbidden, CodeUserNotFound, "no user with "+c.Masked())
	case len(users) > 1:
		return User{}, refuse(http.StatusForbidden, CodeUserNotUniq, "several users with "+c.Masked())
	case users[0].Admin:
		return User{}, refuse(http.StatusForbidden, CodeForbiddenForTargetUser, "user "+users[0].ID+" is an administrator")
	}
	return users[0], nil
}

// link is step 0: PUT register-external-service-id?api-key&serviceUserId&phone.
func (s *Server) link(r *http.Request, p *Partner) (any, *refusal) {
	q := r.URL.Query()
	serviceUserID := strings.TrimSpace(q.Get("serviceUserId"))
	if !q.Has("phone") {
		return nil, refuse(http.StatusBadRequest, CodeMissingParameter, "no phone")
	}
	if serviceUserID == "" {
		return nil, refuse(http.StatusForbidden, CodeNotID, "no serviceUserId")
	}
	if !p.CanLinkByPhone {
		return nil, refuse(http.StatusForbidden, CodeInvalidAPIKey, "partner "+p.Name+" has no permission to link users")
	}
	phone, err := canonical.ParsePhone(q.Get("phone"))
	if err != nil {
		return nil, refuse(http.StatusBadRequest, CodeInvalidCredential, err.Error())
	}
	u, ref := s.oneUser(phone)
	if ref != nil {
		return nil, ref
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := linkKey{p.Name, serviceUserID}
	if other, ok := s.links[k]; ok && other != u.ID {
		return nil, refuse(http.StatusForbidden, CodeUnknownError, "serviceUserId "+serviceUserID+" is already linked to another user")
	}
	s.links[k] = u.ID
	s.stats.Links++
	s.log.Info().Str("partner", p.Name).Str("serviceUserId", serviceUserID).Str("user", u.ID).Msg("linked")
	return map[string]any{}, nil
}

// credentialFromQuery reads the credential under its kind's name (phone,
// snils, thumbprint), or under the specification's generic name credential.
// It returns the value exactly as sent: the text is rebuilt from it.
func credentialFromQuery(q map[string][]string) (canonical.Credential, string, *refusal) {
	var found []canonical.Kind
	var raw string
	for _, k := range []canonical.Kind{canonical.Phone, canonical.SNILS, canonical.Thumbprint} {
		if v, ok := q[k.String()]; ok {
			found = append(found, k)
			raw = v[0]
		}
	}
	if v, ok := q["credential"]; ok && len(found) == 0 {
		raw = v[0]
		switch {
		case len(raw) == 40:
			found = append(found, canonical.Thumbprint)
		case len(raw) == 11:
			found = append(found, canonical.SNILS)
		default:
			found = append(found, canonical.Phone)
		}
	}
	if len(found) != 1 {
		return canonical.Credential{}, "", refuse(http.StatusBadRequest, CodeMissingParameter, "want exactly one credential parameter")
	}
	c, err := canonical.Parse(found[0], raw, canonical.Options{AllowLegacySNILS: true})
	if err != nil {
		return c, raw, refuse(http.StatusBadRequest, CodeInvalidCredential, err.Error())
	}
	return c, raw, nil
}

// authenticate is step 1: POST authenticate-by-truster, body the detached
// signature over the text rebuilt from the query.
func (s *Server) authenticate(r *http.Request, p *Partner) (any, *refusal) {
	q := r.URL.Query()
	for _, name := range []string{"timestamp", "serviceUserId"} {
		if !q.Has(name) {
			return nil, refuse(http.StatusBadRequest, CodeMissingParameter, "no "+name)
		}
	}
	cred, rawID, ref := credentialFromQuery(q)
	if ref != nil {
		return nil, ref
	}
	stamp := q.Get("timestamp")
	ts, err := canonical.ParseTimestamp(stamp)
	if err != nil {
		return nil, refuse(http.StatusBadRequest, CodeInvalidTimestamp, err.Error())
	}
	now := s.clock()
	if d := now.Sub(ts); d > time.Duration(s.cfg.TimestampSkew) || d < -time.Duration(s.cfg.TimestampSkew) {
		return nil, refuse(http.StatusBadRequest, CodeStaleTimestamp, "timestamp is "+d.Round(time.Second).String()+" away from now")
	}
	der, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || len(der) == 0 {
		return nil, refuse(http.StatusBadRequest, CodeInvalidSignature, "no signature in the body")
	}
	// The text the client must have signed, rebuilt from what it sent.
	text := []byte("apikey=" + strings.ToLower(q.Get("apiKey")) + "\r\nid=" + rawID + "\r\ntimestamp=" + stamp + "\r\n")
	v, err := signer.Verify(der, text, nil)
	if err != nil {
		return nil, refuse(http.StatusBadRequest, CodeInvalidSignature, err.Error())
	}
	if !trusted(p, v, now) {
		return nil, refuse(http.StatusBadRequest, CodeUntrustedCertificate, "signer "+v.Signer.Subject.String()+" is not trusted for partner "+p.Name)
	}
	serviceUserID := strings.TrimSpace(q.Get("serviceUserId"))
	if serviceUserID == "" {
		return nil, refuse(http.StatusForbidden, CodeNotID, "empty serviceUserId")
	}
	u, ref := s.oneUser(cred)
	if ref != nil {
		return nil, ref
	}
	key := randomHex(16)
	// One signature is one Key: sent again with the same serviceUserId (a
	// retry whose answer was lost), it gets the same Key while that is
	// pending, and a refusal once the Key is spent or expired. Sent with
	// another serviceUserId it is refused at once: the signed text does not
	// hold the serviceUserId, so that is the same text signed once, used
	// for someone else.
	digest := sha256.Sum256(der)
	s.mu.Lock()
	s.sweep(now)
	linked := s.links[linkKey{p.Name, serviceUserID}]
	if linked != u.ID {
		s.mu.Unlock()
		return nil, refuse(http.StatusForbidden, CodeUserNotFound, "user "+u.ID+" is not linked to "+p.Name+":"+serviceUserID)
	}
	if sp, seen := s.used[digest]; seen {
		pk, pending := s.keys[sp.key]
		base := s.baseURL
		s.mu.Unlock()
		if !pending || now.After(pk.expires) || sp.serviceUserID != serviceUserID {
			return nil, refuse(http.StatusBadRequest, CodeSignatureReused, "this signature was already used; sign a new text (another second)")
		}
		return challenge(base, rawID, sp.key), nil
	}
	s.used[digest] = spent{key: key, serviceUserID: serviceUserID, until: ts.Add(time.Duration(s.cfg.TimestampSkew))}
	s.keys[key] = &pendingKey{partner: p.Name, userID: u.ID, id: rawID, serviceUserID: serviceUserID, expires: now.Add(time.Duration(s.cfg.KeyTTL))}
	s.stats.Challenges++
	s.stats.ChallengesByUser[serviceUserID]++
	base := s.baseURL
	s.mu.Unlock()
	return challenge(base, rawID, key), nil
}

// spent is a step-1 signature already answered: its Key, the serviceUserId
// it came with, and until when it is remembered.
type spent struct {
	key           string
	serviceUserID string
	until         time.Time
}

func challenge(base, rawID, key string) map[string]any {
	href := base + apiPath + "approve-truster?id=" + url.QueryEscape(rawID) + "&key=" + key
	return map[string]any{"Key": key, "Link": map[string]string{"Rel": "Send key to this link", "Href": href}}
}

// sweep forgets expired Keys and spent signatures whose timestamps are out
// of the window, at most once a second: unused Keys do not pile up.
func (s *Server) sweep(now time.Time) {
	if now.Before(s.nextSweep) {
		return
	}
	s.nextSweep = now.Add(time.Second)
	for k, pk := range s.keys {
		if now.After(pk.expires) {
			delete(s.keys, k)
		}
	}
	for d, sp := range s.used {
		if now.After(sp.until) {
			delete(s.used, d)
		}
	}
}

// trusted reports whether the signer's certificate is one the partner
// registered, or chains to one of the partner's CAs.
func trusted(p *Partner, v *signer.Verified, now time.Time) bool {
	for _, c := range p.certs {
		if c.Equal(v.Signer) {
			return now.Before(c.NotAfter) && now.After(c.NotBefore)
		}
	}
	if p.roots == nil {
		return false
	}
	inter := x509.NewCertPool()
	for _, c := range v.Certificates {
		inter.AddCert(c)
	}
	_, err := v.Signer.Verify(x509.VerifyOptions{Roots: p.roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}

// approve is step 2: POST approve-truster?key&id&apiKey.
func (s *Server) approve(r *http.Request, p *Partner) (any, *refusal) {
	q := r.URL.Query()
	for _, name := range []string{"key", "id"} {
		if strings.TrimSpace(q.Get(name)) == "" {
			return nil, refuse(http.StatusBadRequest, CodeMissingParameter, "no "+name)
		}
	}
	now := s.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	pk, ok := s.keys[q.Get("key")]
	// A Key is single-use: it is spent by any attempt to approve it.
	delete(s.keys, q.Get("key"))
	switch {
	case !ok:
		return nil, refuse(http.StatusBadRequest, CodeInvalidKey, "unknown or already used key")
	case pk.partner != p.Name:
		return nil, refuse(http.StatusBadRequest, CodeInvalidKey, "key was issued to another partner")
	case pk.id != q.Get("id"):
		return nil, refuse(http.StatusBadRequest, CodeInvalidKey, "key was issued for another credential")
	case now.After(pk.expires):
		return nil, refuse(http.StatusBadRequest, CodeKeyExpired, "key expired at "+pk.expires.UTC().Format(time.RFC3339))
	}
	sid := randomToken(32)
	s.sids[sid] = SessionRecord{UserID: pk.userID, Partner: pk.partner, ServiceUserID: pk.serviceUserID, Created: now}
	s.stats.Sessions++
	s.stats.SessionsByUser[pk.serviceUserID]++
	s.log.Info().Str("partner", p.Name).Str("user", pk.userID).Msg("session issued")
	return map[string]string{"Sid": sid}, nil
}
