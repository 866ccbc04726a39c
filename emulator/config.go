// Package emulator is an emulator of the service: its trusted
// authentication (emulator/trusted), the legacy scheme's Authenticate
// (emulator/legacy), the identity provider (emulator/idp) and the business
// API (emulator/business), each a side of its own over a shared directory
// of partners, users and organizations (emulator/directory). The server
// here reads the configuration, mounts the sides, and owns the clock, the
// listener and the stats. It is for tests and for partners trying an
// integration on their own machine; it runs stand-alone
// (signagent-emulator) or in-process on a random loopback port (Start).
package emulator

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/signagent/signagent/emulator/business"
	"github.com/signagent/signagent/emulator/directory"
	"github.com/signagent/signagent/emulator/idp"
	"github.com/signagent/signagent/emulator/kit"
	"github.com/signagent/signagent/emulator/legacy"
	"github.com/signagent/signagent/emulator/trusted"
	"github.com/signagent/signagent/safefile"
)

// The configuration's types, from the sides that own them.
type (
	Partner      = directory.Partner
	User         = directory.User
	Organization = directory.Organization
	Box          = directory.Box
	Developer    = legacy.Developer
	OIDCConfig   = idp.Config
	OIDCClient   = idp.Client
	Duration     = kit.Duration
	Fault        = kit.Fault
	// SessionRecord is an issued auth.sid.
	SessionRecord = trusted.SessionRecord
)

// ChallengeDocument is the ChallengeFault that answers certificate logins
// with a document instead of a random.
const ChallengeDocument = legacy.ChallengeDocument

// RegistrationsPerDay is how many registering GetMyOrganizations calls a
// user may make in a day.
const RegistrationsPerDay = business.RegistrationsPerDay

// HashPassword makes the passwordHash of a user in the configuration.
func HashPassword(password []byte) (string, error) { return directory.HashPassword(password) }

// Config is the emulator's configuration file: the directory (partners,
// users, organizations) and each side's section.
type Config struct {
	// Partners are the trusted systems the service knows.
	Partners []Partner `yaml:"partners"`
	// Users are the service's users.
	Users []User `yaml:"users"`
	// TimestampSkew is how far a step-1 timestamp may be from the
	// emulator's clock (default 5m).
	TimestampSkew Duration `yaml:"timestampSkew"`
	// KeyTTL is how long a step-1 Key can be approved (default 5m).
	KeyTTL Duration `yaml:"keyTTL"`
	// ReadTimeout bounds reading one request, body included (default 30s).
	ReadTimeout Duration `yaml:"readTimeout"`
	// SidTTL is how long an auth.sid can be exchanged for a legacy token
	// (default 24h).
	SidTTL Duration `yaml:"sidTTL"`

	// Developers are the integrators of the legacy scheme, by developer key.
	Developers []Developer `yaml:"developers"`
	// TokenTTL is how long a legacy token is valid (default 24h).
	TokenTTL Duration `yaml:"tokenTTL"`
	// ChallengeTTL is how long a certificate login's random waits for
	// AuthenticateConfirm (default 10m).
	ChallengeTTL Duration `yaml:"challengeTTL"`
	// OAEP makes certificate logins transport the content key with RSA-OAEP
	// (SHA-1) instead of RSA PKCS#1 v1.5.
	OAEP bool `yaml:"oaep"`
	// ChallengeFault makes certificate logins answer what a hostile service
	// would, for tests of the client's refusal: "document" seals an 87-byte
	// document to the certificate instead of the 32-byte random (as
	// `openssl cms -encrypt` does: AES-256-CBC, the same key transport), and
	// AuthenticateConfirm then accepts that document back. "" is the real
	// challenge.
	ChallengeFault string `yaml:"challengeFault"`
	// GOSTContentSBox is the GOST 28147-89 S-box of a certificate login's
	// content for a GOST R 34.10-2012 certificate: "CryptoPro-A" (default)
	// or "TC26-Z". The service's is not documented; OpenSSL's gost engine
	// makes either.
	GOSTContentSBox string `yaml:"gostContentSBox"`

	// OIDC is the identity provider's side (OpenID Connect).
	OIDC OIDCConfig `yaml:"oidc"`

	// Organizations and their boxes, for the business methods.
	Organizations []Organization `yaml:"organizations"`

	prepared bool
}

// directory is the configuration's directory (sharing its slices).
func (cfg *Config) directory() *directory.Directory {
	return &directory.Directory{Partners: cfg.Partners, Users: cfg.Users, Organizations: cfg.Organizations}
}

func (cfg *Config) trustedConfig() trusted.Config {
	return trusted.Config{TimestampSkew: cfg.TimestampSkew, KeyTTL: cfg.KeyTTL, SidTTL: cfg.SidTTL}
}

func (cfg *Config) legacyConfig() legacy.Config {
	return legacy.Config{Developers: cfg.Developers, TokenTTL: cfg.TokenTTL, ChallengeTTL: cfg.ChallengeTTL, OAEP: cfg.OAEP, ChallengeFault: cfg.ChallengeFault,
		GOSTContentSBox: cfg.GOSTContentSBox}
}

// LoadConfig reads and checks a configuration file. Relative file names in
// it are relative to the file's directory.
func LoadConfig(path string) (*Config, error) {
	b, err := safefile.Read(path, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("could not read the emulator configuration: %w", err)
	}
	var cfg Config
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := cfg.prepare(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &cfg, nil
}

// prepare fills defaults, loads certificates and checks the configuration.
// It does so once: a Config from LoadConfig is not prepared again by New.
func (cfg *Config) prepare(dir string) error {
	if cfg.prepared {
		return nil
	}
	cfg.own()
	if err := cfg.check(dir); err != nil {
		return err
	}
	cfg.prepared = true
	return nil
}

// own gives cfg its own copies of the lists the checks fill in (defaults,
// normalized values, keys loaded), so that they never write into what the
// caller shares: tests build many configurations from the same
// organizations, users and clients, and start emulators side by side.
func (cfg *Config) own() {
	cfg.Partners = slices.Clone(cfg.Partners)
	cfg.Developers = slices.Clone(cfg.Developers)
	cfg.OIDC.Clients = slices.Clone(cfg.OIDC.Clients)
	cfg.Users = slices.Clone(cfg.Users)
	for i := range cfg.Users {
		cfg.Users[i].Thumbprints = slices.Clone(cfg.Users[i].Thumbprints)
	}
	cfg.Organizations = slices.Clone(cfg.Organizations)
	for i := range cfg.Organizations {
		cfg.Organizations[i].Boxes = slices.Clone(cfg.Organizations[i].Boxes)
	}
}

// check has each side check its section (and fill its defaults, kept
// here), then the directory.
func (cfg *Config) check(dir string) error {
	cfg.ReadTimeout.Default(30 * time.Second)
	tc := cfg.trustedConfig()
	tc.Defaults()
	cfg.TimestampSkew, cfg.KeyTTL, cfg.SidTTL = tc.TimestampSkew, tc.KeyTTL, tc.SidTTL
	lc := cfg.legacyConfig()
	if err := lc.Check(dir); err != nil {
		return err
	}
	cfg.TokenTTL, cfg.ChallengeTTL, cfg.GOSTContentSBox = lc.TokenTTL, lc.ChallengeTTL, lc.GOSTContentSBox
	if len(cfg.Partners) == 0 && len(cfg.Developers) == 0 && len(cfg.OIDC.Clients) == 0 {
		return errors.New("no partners, developers or OpenID Connect clients: the emulator would refuse everyone")
	}
	if err := cfg.OIDC.Check(dir); err != nil {
		return err
	}
	return cfg.directory().Check(dir)
}
