// Package legacy is the emulator's side of the legacy scheme: Authenticate
// (V3) by password, by certificate (a random sealed to the certificate,
// confirmed by AuthenticateConfirm) and by auth.sid, the tokens it issues,
// and the check of a business call's ServiceAuth header. It spells the
// wire itself (header.go), sharing no code with the client's legacy
// package.
package legacy

import (
	"fmt"
	"sync"
	"time"

	"github.com/signagent/signagent/emulator/directory"
	"github.com/signagent/signagent/emulator/kit"
	"github.com/signagent/signagent/internal/gost"
)

// Codes of the legacy scheme's answers, sent in the X-Service-ErrorCode
// header with a plain-text body. Http.Auth and Auth.RndBytesNotFound are the
// wire notes'; the others are the emulator's, where the notes give none.
const (
	CodeWrongPassword    = "Auth.WrongPassword"
	CodeUnknownCert      = "Auth.CertificateNotFound"
	CodeRndBytesNotFound = "Auth.RndBytesNotFound"
	CodeRndBytesMismatch = "Auth.RndBytesMismatch"
	CodeInvalidSid       = "Auth.InvalidSid"

	legacyAuthenticate    = "Authenticate"
	legacyConfirm         = "AuthenticateConfirm"
	maxLegacyRequestBytes = 64 << 10
)

// Developer is an integrator of the legacy scheme.
type Developer struct {
	Name string `yaml:"name"`
	// Key, or KeyFile holding it: the developer key (an opaque string).
	Key     string `yaml:"key"`
	KeyFile string `yaml:"keyFile"`
}

// Config is the side's section of the configuration.
type Config struct {
	// Developers are the integrators, by developer key.
	Developers []Developer
	// TokenTTL is how long a token is valid (default 24h).
	TokenTTL kit.Duration
	// ChallengeTTL is how long a certificate login's random waits for
	// AuthenticateConfirm (default 10m).
	ChallengeTTL kit.Duration
	// OAEP transports the content key with RSA-OAEP (SHA-1) instead of
	// RSA PKCS#1 v1.5.
	OAEP bool
	// ChallengeFault "document" seals FaultDocument instead of a random.
	ChallengeFault string
	// GOSTContentSBox is the GOST 28147-89 S-box of a challenge's content
	// for a GOST certificate: "CryptoPro-A" (the default) or "TC26-Z" (the
	// key wrap's is TC26-Z, as OpenSSL's gost engine makes it).
	GOSTContentSBox string
}

// Check fills the defaults and loads and checks the developers' keys
// (relative file names are relative to dir).
func (c *Config) Check(dir string) error {
	c.TokenTTL.Default(24 * time.Hour)
	c.ChallengeTTL.Default(10 * time.Minute)
	if f := c.ChallengeFault; f != "" && f != ChallengeDocument {
		return fmt.Errorf("challengeFault %q: want %q or nothing", f, ChallengeDocument)
	}
	if c.GOSTContentSBox == "" {
		c.GOSTContentSBox = gost.SBoxCryptoProA.Name
	}
	if s := c.GOSTContentSBox; s != gost.SBoxCryptoProA.Name && s != gost.SBoxTC26Z.Name {
		return fmt.Errorf("gostContentSBox %q: want %q or %q", s, gost.SBoxCryptoProA.Name, gost.SBoxTC26Z.Name)
	}
	names, keys := map[string]bool{}, map[string]bool{}
	for i := range c.Developers {
		d := &c.Developers[i]
		if d.Name == "" {
			d.Name = fmt.Sprintf("developer%d", i+1)
		}
		if names[d.Name] {
			return fmt.Errorf("developer %q appears twice", d.Name)
		}
		names[d.Name] = true
		if d.KeyFile != "" {
			k, err := kit.ReadSecret(dir, d.KeyFile)
			if err != nil {
				return fmt.Errorf("developer %q: %w", d.Name, err)
			}
			d.Key = k
		}
		k, why := checkDeveloperKey(d.Key)
		if why != "" {
			return fmt.Errorf("developer %q: %s", d.Name, why)
		}
		if keys[k] {
			return fmt.Errorf("developer %q: its key is another developer's too", d.Name)
		}
		d.Key, keys[k] = k, true
	}
	return nil
}

// Stats counts what the side issued and holds.
type Stats struct {
	// Tokens and Challenges count what Authenticate (V3) issued;
	// HeldTokens and PendingRandoms are what it holds now.
	Tokens         int `json:"legacyTokens"`
	Challenges     int `json:"legacyChallenges"`
	HeldTokens     int `json:"heldTokens"`
	PendingRandoms int `json:"pendingRandoms"`
}

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

// Side is the legacy scheme's side.
type Side struct {
	env     *kit.Env
	dir     *directory.Directory
	cfg     Config
	sidUser func(sid string) (string, bool)

	mu        sync.Mutex
	tokens    map[string]legacyToken    // issued tokens
	randoms   map[string]*pendingRandom // by certificate thumbprint
	nextSweep time.Time
	stats     Stats
}

// New is the side over dir; sidUser is the user of an auth.sid the
// trusted side issued, while it may be exchanged.
func New(env *kit.Env, dir *directory.Directory, cfg Config, sidUser func(sid string) (string, bool)) *Side {
	return &Side{env: env, dir: dir, cfg: cfg, sidUser: sidUser, tokens: map[string]legacyToken{}, randoms: map[string]*pendingRandom{}}
}

// Stats returns a copy of the side's counts.
func (s *Side) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.stats
	c.HeldTokens, c.PendingRandoms = len(s.tokens), len(s.randoms)
	return c
}
