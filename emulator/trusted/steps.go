package trusted

import (
	"crypto/sha256"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/emulator/directory"
	"github.com/signagent/signagent/emulator/kit"
	"github.com/signagent/signagent/signer"
)

func (s *Side) oneUser(c canonical.Credential) (directory.User, *kit.Refusal) {
	users := s.dir.UsersWith(c)
	switch {
	case len(users) == 0:
		return directory.User{}, kit.Refuse(http.StatusForbidden, CodeUserNotFound, "no user with "+c.Masked())
	case len(users) > 1:
		return directory.User{}, kit.Refuse(http.StatusForbidden, CodeUserNotUniq, "several users with "+c.Masked())
	case users[0].Admin:
		return directory.User{}, kit.Refuse(http.StatusForbidden, CodeForbiddenForTargetUser, "user "+users[0].ID+" is an administrator")
	}
	return users[0], nil
}

// link is step 0: PUT register-external-service-id?api-key&serviceUserId&phone.
func (s *Side) link(r *http.Request, p *directory.Partner) (any, *kit.Refusal) {
	q := r.URL.Query()
	serviceUserID := strings.TrimSpace(q.Get("serviceUserId"))
	if !q.Has("phone") {
		return nil, kit.Refuse(http.StatusBadRequest, CodeMissingParameter, "no phone")
	}
	if serviceUserID == "" {
		return nil, kit.Refuse(http.StatusForbidden, CodeNotID, "no serviceUserId")
	}
	if !p.CanLinkByPhone {
		return nil, kit.Refuse(http.StatusForbidden, CodeInvalidAPIKey, "partner "+p.Name+" has no permission to link users")
	}
	phone, err := canonical.ParsePhone(q.Get("phone"))
	if err != nil {
		return nil, kit.Refuse(http.StatusBadRequest, CodeInvalidCredential, err.Error())
	}
	u, ref := s.oneUser(phone)
	if ref != nil {
		return nil, ref
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := linkKey{p.Name, serviceUserID}
	if other, ok := s.links[k]; ok && other != u.ID {
		return nil, kit.Refuse(http.StatusForbidden, CodeUnknownError, "serviceUserId "+serviceUserID+" is already linked to another user")
	}
	s.links[k] = u.ID
	s.stats.Links++
	s.env.Log.Info().Str("partner", p.Name).Str("serviceUserId", serviceUserID).Str("user", u.ID).Msg("linked")
	return map[string]any{}, nil
}

// credentialFromQuery reads the credential under its kind's name (phone,
// snils, thumbprint), or under the specification's generic name credential.
// It returns the value exactly as sent: the text is rebuilt from it.
func credentialFromQuery(q map[string][]string) (canonical.Credential, string, *kit.Refusal) {
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
		return canonical.Credential{}, "", kit.Refuse(http.StatusBadRequest, CodeMissingParameter, "want exactly one credential parameter")
	}
	c, err := canonical.Parse(found[0], raw, canonical.Options{AllowLegacySNILS: true})
	if err != nil {
		return c, raw, kit.Refuse(http.StatusBadRequest, CodeInvalidCredential, err.Error())
	}
	return c, raw, nil
}

// authenticate is step 1: POST authenticate-by-truster, body the detached
// signature over the text rebuilt from the query.
func (s *Side) authenticate(r *http.Request, p *directory.Partner) (any, *kit.Refusal) {
	q := r.URL.Query()
	for _, name := range []string{"timestamp", "serviceUserId"} {
		if !q.Has(name) {
			return nil, kit.Refuse(http.StatusBadRequest, CodeMissingParameter, "no "+name)
		}
	}
	cred, rawID, ref := credentialFromQuery(q)
	if ref != nil {
		return nil, ref
	}
	stamp := q.Get("timestamp")
	ts, err := canonical.ParseTimestamp(stamp)
	if err != nil {
		return nil, kit.Refuse(http.StatusBadRequest, CodeInvalidTimestamp, err.Error())
	}
	now := s.env.Now()
	if d := now.Sub(ts); d > time.Duration(s.cfg.TimestampSkew) || d < -time.Duration(s.cfg.TimestampSkew) {
		return nil, kit.Refuse(http.StatusBadRequest, CodeStaleTimestamp, "timestamp is "+d.Round(time.Second).String()+" away from now")
	}
	der, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || len(der) == 0 {
		return nil, kit.Refuse(http.StatusBadRequest, CodeInvalidSignature, "no signature in the body")
	}
	// The text the client must have signed, rebuilt from what it sent.
	text := []byte("apikey=" + strings.ToLower(q.Get("apiKey")) + "\r\nid=" + rawID + "\r\ntimestamp=" + stamp + "\r\n")
	v, err := signer.Verify(der, text, nil)
	if err != nil {
		return nil, kit.Refuse(http.StatusBadRequest, CodeInvalidSignature, err.Error())
	}
	if !p.Trusts(v, now) {
		return nil, kit.Refuse(http.StatusBadRequest, CodeUntrustedCertificate, "signer "+v.Signer.Subject.String()+" is not trusted for partner "+p.Name)
	}
	serviceUserID := strings.TrimSpace(q.Get("serviceUserId"))
	if serviceUserID == "" {
		return nil, kit.Refuse(http.StatusForbidden, CodeNotID, "empty serviceUserId")
	}
	u, ref := s.oneUser(cred)
	if ref != nil {
		return nil, ref
	}
	key := kit.RandomHex(16)
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
		return nil, kit.Refuse(http.StatusForbidden, CodeUserNotFound, "user "+u.ID+" is not linked to "+p.Name+":"+serviceUserID)
	}
	if sp, seen := s.used[digest]; seen {
		pk, pending := s.keys[sp.key]
		base := s.env.URL()
		s.mu.Unlock()
		if !pending || now.After(pk.expires) || sp.serviceUserID != serviceUserID {
			return nil, kit.Refuse(http.StatusBadRequest, CodeSignatureReused, "this signature was already used; sign a new text (another second)")
		}
		return challenge(base, rawID, sp.key), nil
	}
	s.used[digest] = spent{key: key, serviceUserID: serviceUserID, until: ts.Add(time.Duration(s.cfg.TimestampSkew))}
	s.keys[key] = &pendingKey{partner: p.Name, userID: u.ID, id: rawID, serviceUserID: serviceUserID, expires: now.Add(time.Duration(s.cfg.KeyTTL))}
	s.stats.Challenges++
	s.stats.ChallengesByUser[serviceUserID]++
	base := s.env.URL()
	s.mu.Unlock()
	return challenge(base, rawID, key), nil
}

func challenge(base, rawID, key string) map[string]any {
	href := base + APIPath + "approve-truster?id=" + url.QueryEscape(rawID) + "&key=" + key
	return map[string]any{"Key": key, "Link": map[string]string{"Rel": "Send key to this link", "Href": href}}
}

// sweep forgets expired Keys and spent signatures whose timestamps are out
// of the window, at most once a second: unused Keys do not pile up.
func (s *Side) sweep(now time.Time) {
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

// approve is step 2: POST approve-truster?key&id&apiKey.
func (s *Side) approve(r *http.Request, p *directory.Partner) (any, *kit.Refusal) {
	q := r.URL.Query()
	for _, name := range []string{"key", "id"} {
		if strings.TrimSpace(q.Get(name)) == "" {
			return nil, kit.Refuse(http.StatusBadRequest, CodeMissingParameter, "no "+name)
		}
	}
	now := s.env.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	pk, ok := s.keys[q.Get("key")]
	// A Key is single-use: it is spent by any attempt to approve it.
	delete(s.keys, q.Get("key"))
	switch {
	case !ok:
		return nil, kit.Refuse(http.StatusBadRequest, CodeInvalidKey, "unknown or already used key")
	case pk.partner != p.Name:
		return nil, kit.Refuse(http.StatusBadRequest, CodeInvalidKey, "key was issued to another partner")
	case pk.id != q.Get("id"):
		return nil, kit.Refuse(http.StatusBadRequest, CodeInvalidKey, "key was issued for another credential")
	case now.After(pk.expires):
		return nil, kit.Refuse(http.StatusBadRequest, CodeKeyExpired, "key expired at "+pk.expires.UTC().Format(time.RFC3339))
	}
	sid := s.issueLocked(SessionRecord{UserID: pk.userID, Partner: pk.partner, ServiceUserID: pk.serviceUserID, Created: now})
	s.stats.SessionsByUser[pk.serviceUserID]++
	s.env.Log.Info().Str("partner", p.Name).Str("user", pk.userID).Msg("session issued")
	return map[string]string{"Sid": sid}, nil
}
