package emulator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Error codes. The first six are the specification's (section 7.3); the
// others are the emulator's own, for refusals the specification leaves
// without a code. They are spelled here apart from package trusted's on
// purpose: the emulator plays the service, and a misspelt code in the client
// must show up as a failing test rather than agree with itself.
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
	CodeInternal             = "InternalError"
)

const apiPath = "/auth/v5.16/"

// Fault is an answer the emulator gives instead of serving a request: a
// delay, then (when Status is set) that status with Code (default
// InternalError). Tests use it to drive the client's retries and time-outs,
// and to have the service say what timing alone cannot make it say on cue.
type Fault struct {
	Delay  time.Duration
	Status int
	Code   string
	// RetryAfter, when not empty, is sent as the Retry-After header (a
	// 429 or 503 that asks the client to wait).
	RetryAfter string
}

// Stats counts what the emulator did.
type Stats struct {
	Links      int            `json:"links"`
	Challenges int            `json:"challenges"`
	Sessions   int            `json:"sessions"`
	Requests   map[string]int `json:"requests"`   // by step
	Rejections map[string]int `json:"rejections"` // by code
	// SessionsByUser counts auth.sids issued per service user id.
	SessionsByUser map[string]int `json:"sessionsByUser"`
	// ChallengesByUser counts Keys issued per service user id.
	ChallengesByUser map[string]int `json:"challengesByUser"`
	// PendingKeys and SpentSignatures are what the emulator holds in
	// memory now: Keys not yet approved and step-1 signatures remembered
	// against replay.
	PendingKeys     int `json:"pendingKeys"`
	SpentSignatures int `json:"spentSignatures"`
	// LegacyTokens and LegacyChallenges count what Authenticate (V3)
	// issued; HeldTokens and PendingRandoms are what it holds now.
	LegacyTokens     int `json:"legacyTokens"`
	LegacyChallenges int `json:"legacyChallenges"`
	HeldTokens       int `json:"heldTokens"`
	PendingRandoms   int `json:"pendingRandoms"`
	// AccessTokens and Refreshes count what the identity provider issued.
	AccessTokens int `json:"accessTokens"`
	Refreshes    int `json:"refreshes"`
	// RefreshReuses counts spent one-time refresh tokens presented again
	// (each revoked its sign-in's grant): a client that sends one is
	// signing its user out.
	RefreshReuses int `json:"refreshReuses"`
	// Registrations counts GetMyOrganizations calls that registered the
	// user's organizations (autoRegister absent or true).
	Registrations int `json:"registrations"`
}

type linkKey struct{ partner, serviceUserID string }

type pendingKey struct {
	partner       string
	userID        string
	id            string
	serviceUserID string
	expires       time.Time
}

// SessionRecord is an issued auth.sid.
type SessionRecord struct {
	UserID        string
	Partner       string
	ServiceUserID string
	Created       time.Time
}

// Server is the emulator.
type Server struct {
	cfg *Config
	log zerolog.Logger
	now func() time.Time

	mu    sync.Mutex
	links map[linkKey]string // -> user id
	keys  map[string]*pendingKey
	// used holds the digests of step-1 signatures already accepted, until
	// their timestamp leaves the skew window (then the timestamp check
	// refuses them anyway): a signed request is good once.
	used            map[[32]byte]spent
	nextSweep       time.Time
	sids            map[string]SessionRecord
	tokens          map[string]legacyToken    // legacy authorization tokens
	randoms         map[string]*pendingRandom // by certificate thumbprint
	nextLegacySweep time.Time
	idp             *idp
	nextOIDCSweep   time.Time
	stats           Stats
	faults          map[string][]Fault
	registrations   map[string]dayCount // registering GetMyOrganizations today, by user id
	baseURL         string
	listener        net.Listener
	srv             *http.Server
}

// New returns an emulator for cfg, from LoadConfig or built in code (file
// names in a Config built in code are relative to the working directory).
func New(cfg *Config, log zerolog.Logger) (*Server, error) {
	if err := cfg.prepare("."); err != nil {
		return nil, err
	}
	idp, err := newIDP()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, log: log, now: time.Now, idp: idp,
		links:  map[linkKey]string{},
		keys:   map[string]*pendingKey{},
		used:   map[[32]byte]spent{},
		sids:   map[string]SessionRecord{},
		tokens: map[string]legacyToken{}, randoms: map[string]*pendingRandom{},
		faults: map[string][]Fault{}, registrations: map[string]dayCount{},
		stats: Stats{Requests: map[string]int{}, Rejections: map[string]int{},
			SessionsByUser: map[string]int{}, ChallengesByUser: map[string]int{}},
	}
	for _, u := range cfg.Users {
		for _, l := range u.Linked {
			partner, id, _ := strings.Cut(l, ":")
			s.links[linkKey{partner, id}] = u.ID
		}
	}
	return s, nil
}

// SetClock replaces the emulator's clock (for tests of expiry and skew).
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	s.now = now
	s.mu.Unlock()
}

func (s *Server) clock() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now()
}

// InjectFaults queues faults for a step ("register-external-service-id",
// "authenticate-by-truster" or "approve-truster"); each request to the step
// takes the next one.
func (s *Server) InjectFaults(step string, faults ...Fault) {
	s.mu.Lock()
	s.faults[step] = append(s.faults[step], faults...)
	s.mu.Unlock()
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.stats
	c.Requests, c.Rejections = clone(s.stats.Requests), clone(s.stats.Rejections)
	c.SessionsByUser, c.ChallengesByUser = clone(s.stats.SessionsByUser), clone(s.stats.ChallengesByUser)
	c.PendingKeys, c.SpentSignatures = len(s.keys), len(s.used)
	c.HeldTokens, c.PendingRandoms = len(s.tokens), len(s.randoms)
	return c
}

func clone(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// LookupSid returns the record of an issued auth.sid.
func (s *Server) LookupSid(sid string) (SessionRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sids[sid]
	return r, ok
}

// Handler returns the emulator's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT "+apiPath+"register-external-service-id", s.serve("register-external-service-id", s.link))
	mux.HandleFunc("POST "+apiPath+"authenticate-by-truster", s.serve("authenticate-by-truster", s.authenticate))
	mux.HandleFunc("POST "+apiPath+"approve-truster", s.serve("approve-truster", s.approve))
	mux.HandleFunc("GET /_emulator/stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Stats())
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.legacyRoute(w, r) && !s.businessRoute(w, r) && !s.oidcRoute(w, r) {
			mux.ServeHTTP(w, r)
		}
	})
}

// refusal is an error answer.
type refusal struct {
	status int
	code   string
	why    string // for the emulator's log
}

func refuse(status int, code, why string) *refusal { return &refusal{status, code, why} }

type handler func(r *http.Request, p *Partner) (any, *refusal)

// serve wraps a step: counts it, applies injected faults, checks the API key
// (query name apiKey, or api-key in the link step), and writes the answer.
func (s *Server) serve(step string, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.takeFault(w, r, step) {
			return
		}
		log := s.log.With().Str("step", step).Logger()
		name := "apiKey"
		if step == "register-external-service-id" {
			name = "api-key"
		}
		key := r.URL.Query().Get(name)
		var ans any
		var ref *refusal
		if strings.TrimSpace(key) == "" {
			ref = refuse(http.StatusUnauthorized, CodeInvalidAPIKey, "no "+name+" given")
		} else if p := s.partner(key); p == nil {
			ref = refuse(http.StatusForbidden, CodeInvalidAPIKey, "unknown API key")
		} else {
			ans, ref = h(r, p)
		}
		if ref != nil {
			s.mu.Lock()
			s.stats.Rejections[ref.code]++
			s.mu.Unlock()
			log.Warn().Int("status", ref.status).Str("code", ref.code).Str("reason", ref.why).Msg("rejected")
			writeJSON(w, ref.status, map[string]string{"Code": ref.code})
			return
		}
		writeJSON(w, http.StatusOK, ans)
	}
}

// takeFault counts a request to step and applies the next fault queued
// for it; it reports whether the fault answered the request.
func (s *Server) takeFault(w http.ResponseWriter, r *http.Request, step string) bool {
	s.mu.Lock()
	s.stats.Requests[step]++
	var fault *Fault
	if q := s.faults[step]; len(q) > 0 {
		fault, s.faults[step] = &q[0], q[1:]
	}
	s.mu.Unlock()
	if fault == nil {
		return false
	}
	log := s.log.With().Str("step", step).Logger()
	if fault.Delay > 0 {
		select {
		case <-time.After(fault.Delay):
		case <-r.Context().Done():
			log.Info().Msg("injected delay: the client gave up")
			return true
		}
	}
	if fault.Status == 0 {
		return false
	}
	log.Info().Int("status", fault.Status).Msg("injected fault")
	if fault.RetryAfter != "" {
		w.Header().Set("Retry-After", fault.RetryAfter)
	}
	code := fault.Code
	if code == "" {
		code = CodeInternal
	}
	if step == legacyAuthenticate || step == legacyConfirm {
		plainError(w, fault.Status, code, "Internal server error")
	} else {
		writeJSON(w, fault.Status, map[string]string{"Code": code})
	}
	return true
}

func (s *Server) partner(key string) *Partner {
	for i := range s.cfg.Partners {
		// The service treats the key case-insensitively: the signed text
		// carries it lower-cased.
		if strings.EqualFold(s.cfg.Partners[i].APIKey, key) {
			return &s.cfg.Partners[i]
		}
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(status)
	if v != nil {
		json.NewEncoder(w).Encode(v)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

func randomToken(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Start serves the emulator on a random loopback port until Close.
func (s *Server) Start() error { return s.Listen("127.0.0.1:0") }

// Listen serves the emulator on addr until Close.
func (s *Server) Listen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.listener = l
	s.baseURL = "http://" + l.Addr().String()
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: time.Duration(s.cfg.ReadTimeout), WriteTimeout: time.Duration(s.cfg.ReadTimeout) + 30*time.Second, IdleTimeout: time.Minute}
	s.mu.Unlock()
	go s.srv.Serve(l)
	return nil
}

// URL is the base address the emulator serves on (the client's BaseURL).
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.baseURL
}

// Close stops the server, waiting up to the context's deadline for requests
// in flight.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return srv.Close()
	}
	return nil
}
