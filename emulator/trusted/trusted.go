// Package trusted is the emulator's trusted-authentication side: the three
// endpoints of specification section 4.6 (link, authenticate-by-truster,
// approve-truster) with the checks a real server makes, and the auth.sids
// it issues. It spells the wire itself: it shares no code with the
// client's trusted package, so that a client's mistake shows up as a
// failing test rather than agreeing with itself.
package trusted

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/signagent/signagent/emulator/directory"
	"github.com/signagent/signagent/emulator/kit"
)

// Error codes. The first six are the specification's (section 7.3); the
// others are the emulator's own, for refusals the specification leaves
// without a code.
const (
	CodeForbiddenForTargetUser = "ForbiddenForTargetUser"
	CodeInvalidAPIKey          = "InvalidApiKey"
	CodeNotID                  = "NotId"
	CodeUserNotFound           = "UserNotFound"
	CodeUserNotUniq            = "UserNotUniq"
	CodeUnknownError           = "UnknownError"

	CodeMissingParameter     = "MissingParameter"
	CodeInvalidCredential    = "InvalidCredential"
	CodeInvalidTimestamp     = "InvalidTimestamp"
	CodeStaleTimestamp       = "StaleTimestamp"
	CodeInvalidSignature     = "InvalidSignature"
	CodeUntrustedCertificate = "UntrustedCertificate"
	CodeInvalidKey           = "InvalidKey"
	CodeKeyExpired           = "KeyExpired"
	CodeSignatureReused      = "SignatureReused"
)

// APIPath is where the three endpoints are.
const APIPath = "/auth/v5.16/"

// Config is the side's section of the configuration.
type Config struct {
	// TimestampSkew is how far a step-1 timestamp may be from the clock
	// (default 5m).
	TimestampSkew kit.Duration
	// KeyTTL is how long a step-1 Key can be approved (default 5m).
	KeyTTL kit.Duration
	// SidTTL is how long an auth.sid can be exchanged (default 24h).
	SidTTL kit.Duration
}

// Defaults fills what is not given.
func (c *Config) Defaults() {
	c.TimestampSkew.Default(5 * time.Minute)
	c.KeyTTL.Default(5 * time.Minute)
	c.SidTTL.Default(24 * time.Hour)
}

// Stats counts what the side did and holds.
type Stats struct {
	Links      int `json:"links"`
	Challenges int `json:"challenges"`
	Sessions   int `json:"sessions"`
	// SessionsByUser counts auth.sids issued per service user id.
	SessionsByUser map[string]int `json:"sessionsByUser"`
	// ChallengesByUser counts Keys issued per service user id.
	ChallengesByUser map[string]int `json:"challengesByUser"`
	// PendingKeys and SpentSignatures are what the side holds in memory
	// now: Keys not yet approved and step-1 signatures remembered against
	// replay.
	PendingKeys     int `json:"pendingKeys"`
	SpentSignatures int `json:"spentSignatures"`
}

// SessionRecord is an issued auth.sid.
type SessionRecord struct {
	UserID        string
	Partner       string
	ServiceUserID string
	Created       time.Time
}

type linkKey struct{ partner, serviceUserID string }

type pendingKey struct {
	partner       string
	userID        string
	id            string
	serviceUserID string
	expires       time.Time
}

// spent is a step-1 signature already answered: its Key, the serviceUserId
// it came with, and until when it is remembered.
type spent struct {
	key           string
	serviceUserID string
	until         time.Time
}

// Side is the trusted-authentication side.
type Side struct {
	env *kit.Env
	dir *directory.Directory
	cfg Config

	mu        sync.Mutex
	links     map[linkKey]string // -> user id
	keys      map[string]*pendingKey
	used      map[[32]byte]spent
	nextSweep time.Time
	sids      map[string]SessionRecord
	stats     Stats
}

// New is the side over dir, with the links the users are configured with.
func New(env *kit.Env, dir *directory.Directory, cfg Config) *Side {
	s := &Side{env: env, dir: dir, cfg: cfg, links: map[linkKey]string{}, keys: map[string]*pendingKey{},
		used: map[[32]byte]spent{}, sids: map[string]SessionRecord{},
		stats: Stats{SessionsByUser: map[string]int{}, ChallengesByUser: map[string]int{}}}
	for _, u := range dir.Users {
		for _, l := range u.Linked {
			partner, id, _ := strings.Cut(l, ":")
			s.links[linkKey{partner, id}] = u.ID
		}
	}
	return s
}

// Mount adds the side's endpoints to mux.
func (s *Side) Mount(mux *http.ServeMux) {
	mux.HandleFunc("PUT "+APIPath+"register-external-service-id", s.serve("register-external-service-id", s.link))
	mux.HandleFunc("POST "+APIPath+"authenticate-by-truster", s.serve("authenticate-by-truster", s.authenticate))
	mux.HandleFunc("POST "+APIPath+"approve-truster", s.serve("approve-truster", s.approve))
}

// Stats returns a copy of the side's counts.
func (s *Side) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.stats
	c.SessionsByUser, c.ChallengesByUser = cloneCounts(s.stats.SessionsByUser), cloneCounts(s.stats.ChallengesByUser)
	c.PendingKeys, c.SpentSignatures = len(s.keys), len(s.used)
	return c
}

func cloneCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// LookupSid returns the record of an issued auth.sid.
func (s *Side) LookupSid(sid string) (SessionRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sids[sid]
	return r, ok
}

// SidUser is the user of an auth.sid that may still be exchanged (for the
// legacy side's Authenticate type=sid).
func (s *Side) SidUser(sid string) (string, bool) {
	rec, ok := s.LookupSid(sid)
	if !ok || !s.env.Now().Before(rec.Created.Add(time.Duration(s.cfg.SidTTL))) {
		return "", false
	}
	return rec.UserID, true
}

type handler func(r *http.Request, p *directory.Partner) (any, *kit.Refusal)

// serve wraps a step: counts it, applies injected faults, checks the API key
// (query name apiKey, or api-key in the link step), and writes the answer.
func (s *Side) serve(step string, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.env.TakeFault(w, r, step, kit.CodeJSON) {
			return
		}
		log := s.env.Log.With().Str("step", step).Logger()
		name := "apiKey"
		if step == "register-external-service-id" {
			name = "api-key"
		}
		key := r.URL.Query().Get(name)
		var ans any
		var ref *kit.Refusal
		if strings.TrimSpace(key) == "" {
			ref = kit.Refuse(http.StatusUnauthorized, CodeInvalidAPIKey, "no "+name+" given")
		} else if p := s.dir.Partner(key); p == nil {
			ref = kit.Refuse(http.StatusForbidden, CodeInvalidAPIKey, "unknown API key")
		} else {
			ans, ref = h(r, p)
		}
		if ref != nil {
			s.env.Reject(ref.Code)
			log.Warn().Int("status", ref.Status).Str("code", ref.Code).Str("reason", ref.Why).Msg("rejected")
			kit.CodeJSON(w, ref.Status, ref.Code)
			return
		}
		kit.WriteJSON(w, http.StatusOK, ans)
	}
}

// Issue issues an auth.sid for rec, as approve-truster does (for tests of
// the exchange that need one without a partner's signature).
func (s *Side) Issue(rec SessionRecord) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issueLocked(rec)
}

func (s *Side) issueLocked(rec SessionRecord) string {
	sid := kit.RandomToken(32)
	s.sids[sid] = rec
	s.stats.Sessions++
	return sid
}
