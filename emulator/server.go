package emulator

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/emulator/business"
	"github.com/signagent/signagent/emulator/idp"
	"github.com/signagent/signagent/emulator/kit"
	"github.com/signagent/signagent/emulator/legacy"
	"github.com/signagent/signagent/emulator/trusted"
)

// The sides' codes, for the emulator's callers (spelled in each side, apart
// from the client's packages on purpose: a misspelt code in the client must
// show up as a failing test rather than agree with itself).
const (
	CodeForbiddenForTargetUser = trusted.CodeForbiddenForTargetUser
	CodeInvalidAPIKey          = trusted.CodeInvalidAPIKey
	CodeNotID                  = trusted.CodeNotID
	CodeUserNotFound           = trusted.CodeUserNotFound
	CodeUserNotUniq            = trusted.CodeUserNotUniq
	CodeUnknownError           = trusted.CodeUnknownError
	CodeMissingParameter       = trusted.CodeMissingParameter
	CodeInvalidCredential      = trusted.CodeInvalidCredential
	CodeInvalidTimestamp       = trusted.CodeInvalidTimestamp
	CodeStaleTimestamp         = trusted.CodeStaleTimestamp
	CodeInvalidSignature       = trusted.CodeInvalidSignature
	CodeUntrustedCertificate   = trusted.CodeUntrustedCertificate
	CodeInvalidKey             = trusted.CodeInvalidKey
	CodeKeyExpired             = trusted.CodeKeyExpired
	CodeSignatureReused        = trusted.CodeSignatureReused
	CodeInternal               = kit.CodeInternal

	CodeHTTPAuth         = kit.CodeHTTPAuth
	CodeBadRequest       = kit.CodeBadRequest
	CodeInvalidAuthToken = kit.CodeInvalidAuthToken
	CodeWrongPassword    = legacy.CodeWrongPassword
	CodeUnknownCert      = legacy.CodeUnknownCert
	CodeRndBytesNotFound = legacy.CodeRndBytesNotFound
	CodeRndBytesMismatch = legacy.CodeRndBytesMismatch
	CodeInvalidSid       = legacy.CodeInvalidSid

	CodeBoxAccessDenied   = business.CodeBoxAccessDenied
	CodeBoxNotFound       = business.CodeBoxNotFound
	CodeRegistrationLimit = business.CodeRegistrationLimit
)

const apiPath = trusted.APIPath

// Stats counts what the emulator did, side by side.
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
	// Revocations counts the refresh tokens revoked (RFC 7009).
	Revocations int `json:"revocations"`
	// Registrations counts GetMyOrganizations calls that registered the
	// user's organizations (autoRegister absent or true).
	Registrations int `json:"registrations"`
}

// Server is the emulator: the sides, mounted by path, over one directory,
// with one clock, one listener and one stats endpoint.
type Server struct {
	cfg      *Config
	env      *kit.Env
	trusted  *trusted.Side
	legacy   *legacy.Side
	idp      *idp.Side
	business *business.Side

	mu       sync.Mutex
	baseURL  string
	listener net.Listener
	srv      *http.Server
}

// New returns an emulator for cfg, from LoadConfig or built in code (file
// names in a Config built in code are relative to the working directory).
func New(cfg *Config, log zerolog.Logger) (*Server, error) {
	if err := cfg.prepare("."); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg}
	s.env = kit.NewEnv(log, s.URL)
	dir := cfg.directory()
	s.trusted = trusted.New(s.env, dir, cfg.trustedConfig())
	s.legacy = legacy.New(s.env, dir, cfg.legacyConfig(), s.trusted.SidUser)
	s.idp = idp.New(s.env, dir, cfg.OIDC)
	s.business = business.New(s.env, dir,
		business.Scheme{Prefix: legacy.HeaderPrefix, User: s.legacy.User},
		business.Scheme{Prefix: idp.BearerPrefix, User: s.idp.User})
	return s, nil
}

// SetClock replaces the emulator's clock (for tests of expiry and skew).
func (s *Server) SetClock(now func() time.Time) { s.env.SetClock(now) }

// InjectFaults queues faults for a step ("register-external-service-id",
// "authenticate-by-truster", "approve-truster", "Authenticate",
// "GetMyOrganizations", an identity provider's path, ...); each request to
// the step takes the next one.
func (s *Server) InjectFaults(step string, faults ...Fault) { s.env.InjectFaults(step, faults...) }

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	t, l, i, b := s.trusted.Stats(), s.legacy.Stats(), s.idp.Stats(), s.business.Stats()
	req, rej := s.env.Counts()
	return Stats{Links: t.Links, Challenges: t.Challenges, Sessions: t.Sessions, Requests: req, Rejections: rej,
		SessionsByUser: t.SessionsByUser, ChallengesByUser: t.ChallengesByUser, PendingKeys: t.PendingKeys, SpentSignatures: t.SpentSignatures,
		LegacyTokens: l.Tokens, LegacyChallenges: l.Challenges, HeldTokens: l.HeldTokens, PendingRandoms: l.PendingRandoms,
		AccessTokens: i.AccessTokens, Refreshes: i.Refreshes, RefreshReuses: i.RefreshReuses, Revocations: i.Revocations, Registrations: b.Registrations}
}

// LookupSid returns the record of an issued auth.sid.
func (s *Server) LookupSid(sid string) (SessionRecord, bool) { return s.trusted.LookupSid(sid) }

// Handler returns the emulator's HTTP handler: each side by its paths.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.trusted.Mount(mux)
	mux.HandleFunc("GET /_emulator/stats", func(w http.ResponseWriter, r *http.Request) {
		kit.WriteJSON(w, http.StatusOK, s.Stats())
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every answer's Date is the emulator's clock, as a real service's
		// is its own: a test that sets the clock apart from this machine's
		// sees the skew a client reads from Date (net/http keeps a Date
		// the handler set).
		w.Header().Set("Date", s.env.Now().UTC().Format(http.TimeFormat))
		if !s.legacy.Route(w, r) && !s.business.Route(w, r) && !s.idp.Route(w, r) {
			mux.ServeHTTP(w, r)
		}
	})
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
