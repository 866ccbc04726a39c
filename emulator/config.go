// Package emulator is an emulator of the service's trusted-authentication
// side: the three endpoints of specification section 4.6 with the checks a
// real server makes, for tests and for partners trying an integration on
// their own machine. It runs stand-alone (signagent-emulator) or in-process
// on a random loopback port (Start).
package emulator

import (
	"crypto/x509"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/safefile"
	"github.com/signagent/signagent/signer"
)

// Config is the emulator's configuration file.
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

	// OIDC is the identity provider's side (OpenID Connect).
	OIDC OIDCConfig `yaml:"oidc"`

	// Organizations and their boxes, for the business methods.
	Organizations []Organization `yaml:"organizations"`

	prepared bool
}

// Partner is a trusted system.
type Partner struct {
	Name string `yaml:"name"`
	// APIKey, or APIKeyFile holding it.
	APIKey     string `yaml:"apiKey"`
	APIKeyFile string `yaml:"apiKeyFile"`
	// Certificates are PEM files (or inline PEM) of signer certificates
	// accepted as they are; CAs are PEM files (or inline PEM) of
	// certificates a signer may chain to. At least one of them is needed.
	Certificates []string `yaml:"certificates"`
	CAs          []string `yaml:"cas"`
	// CanLinkByPhone allows the partner to link users itself (step 0).
	CanLinkByPhone bool `yaml:"canLinkByPhone"`

	certs []*x509.Certificate
	roots *x509.CertPool
}

// Developer is an integrator of the legacy scheme.
type Developer struct {
	Name string `yaml:"name"`
	// Key, or KeyFile holding it: the developer key (an opaque string).
	Key     string `yaml:"key"`
	KeyFile string `yaml:"keyFile"`
}

// User is a user of the service.
type User struct {
	ID    string `yaml:"id"`
	Phone string `yaml:"phone"`
	SNILS string `yaml:"snils"`
	// Thumbprints are the user's certificates (SHA-1): a credential of
	// trusted authentication, and the certificates a legacy certificate
	// login accepts.
	Thumbprints []string `yaml:"thumbprints"`
	// Certificates are PEM files (or inline PEM) whose thumbprints are
	// added to Thumbprints.
	Certificates []string `yaml:"certificates"`
	Admin        bool     `yaml:"admin"`
	// Login and PasswordHash (bcrypt, from signagent-emulator
	// --hash-password) are the legacy password login.
	Login        string `yaml:"login"`
	PasswordHash string `yaml:"passwordHash"`
	// Boxes the user may use, as GUIDs or <32 hex>@<domain>.
	Boxes []string `yaml:"boxes"`
	// Linked lists the trusted-system ids this user is already linked to,
	// as "partner-name:serviceUserId".
	Linked []string `yaml:"linked"`
}

// Duration is a time.Duration written as "5m" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration like 5m or 30s", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
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
	if err := cfg.check(dir); err != nil {
		return err
	}
	cfg.prepared = true
	return nil
}

func (cfg *Config) check(dir string) error {
	if cfg.TimestampSkew <= 0 {
		cfg.TimestampSkew = Duration(5 * time.Minute)
	}
	if cfg.KeyTTL <= 0 {
		cfg.KeyTTL = Duration(5 * time.Minute)
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = Duration(30 * time.Second)
	}
	for _, d := range []*Duration{&cfg.SidTTL, &cfg.TokenTTL} {
		if *d <= 0 {
			*d = Duration(24 * time.Hour)
		}
	}
	if cfg.ChallengeTTL <= 0 {
		cfg.ChallengeTTL = Duration(10 * time.Minute)
	}
	if f := cfg.ChallengeFault; f != "" && f != ChallengeDocument {
		return fmt.Errorf("challengeFault %q: want %q or nothing", f, ChallengeDocument)
	}
	if len(cfg.Partners) == 0 && len(cfg.Developers) == 0 && len(cfg.OIDC.Clients) == 0 {
		return errors.New("no partners, developers or OpenID Connect clients: the emulator would refuse everyone")
	}
	if err := cfg.OIDC.check(dir); err != nil {
		return err
	}
	if err := cfg.checkDevelopers(dir); err != nil {
		return err
	}
	if err := cfg.checkOrganizations(); err != nil {
		return err
	}
	names, err := cfg.checkPartners(dir)
	if err != nil {
		return err
	}
	return cfg.checkUsers(dir, names)
}

// checkPartners loads the partners' keys and certificates; it returns
// their names.
func (cfg *Config) checkPartners(dir string) (map[string]bool, error) {
	names := map[string]bool{}
	keys := map[string]bool{}
	for i := range cfg.Partners {
		p := &cfg.Partners[i]
		if p.Name == "" {
			p.Name = fmt.Sprintf("partner%d", i+1)
		}
		if names[p.Name] {
			return nil, fmt.Errorf("partner %q appears twice", p.Name)
		}
		names[p.Name] = true
		if p.APIKeyFile != "" {
			b, err := safefile.Read(resolve(dir, p.APIKeyFile), 4096)
			if err != nil {
				return nil, fmt.Errorf("partner %q: %w", p.Name, err)
			}
			p.APIKey = string(b)
		}
		k, err := canonical.NormalizeAPIKey(p.APIKey)
		if err != nil {
			return nil, fmt.Errorf("partner %q: %w", p.Name, err)
		}
		p.APIKey = k
		if keys[strings.ToLower(k)] {
			return nil, fmt.Errorf("partner %q: its API key is another partner's too", p.Name)
		}
		keys[strings.ToLower(k)] = true
		for _, c := range p.Certificates {
			certs, err := loadCerts(dir, c)
			if err != nil {
				return nil, fmt.Errorf("partner %q: %w", p.Name, err)
			}
			p.certs = append(p.certs, certs...)
		}
		if len(p.CAs) > 0 {
			p.roots = x509.NewCertPool()
			for _, c := range p.CAs {
				certs, err := loadCerts(dir, c)
				if err != nil {
					return nil, fmt.Errorf("partner %q: %w", p.Name, err)
				}
				for _, cert := range certs {
					p.roots.AddCert(cert)
				}
			}
		}
		if len(p.certs) == 0 && p.roots == nil {
			return nil, fmt.Errorf("partner %q trusts no certificate: give certificates or cas", p.Name)
		}
	}
	return names, nil
}

// checkUsers checks the users and normalizes their credentials.
func (cfg *Config) checkUsers(dir string, partners map[string]bool) error {
	ids := map[string]bool{}
	logins := map[string]bool{}
	for i := range cfg.Users {
		u := &cfg.Users[i]
		if u.ID == "" {
			return fmt.Errorf("user %d has no id", i+1)
		}
		if ids[u.ID] {
			return fmt.Errorf("user %q appears twice", u.ID)
		}
		ids[u.ID] = true
		if u.Phone != "" {
			c, err := canonical.ParsePhone(u.Phone)
			if err != nil {
				return fmt.Errorf("user %q: %w", u.ID, err)
			}
			u.Phone = c.Value
		}
		if u.SNILS != "" {
			c, err := canonical.ParseSNILS(u.SNILS, canonical.Options{AllowLegacySNILS: true})
			if err != nil {
				return fmt.Errorf("user %q: %w", u.ID, err)
			}
			u.SNILS = c.Value
		}
		for _, c := range u.Certificates {
			certs, err := loadCerts(dir, c)
			if err != nil {
				return fmt.Errorf("user %q: %w", u.ID, err)
			}
			for _, cert := range certs {
				u.Thumbprints = append(u.Thumbprints, thumbprint(cert.Raw))
			}
		}
		for j, t := range u.Thumbprints {
			c, err := canonical.ParseThumbprint(t)
			if err != nil {
				return fmt.Errorf("user %q: %w", u.ID, err)
			}
			u.Thumbprints[j] = c.Value
		}
		if err := checkLogin(u, logins); err != nil {
			return err
		}
		for _, l := range u.Linked {
			partner, id, ok := strings.Cut(l, ":")
			if !ok || !partners[partner] || id == "" {
				return fmt.Errorf("user %q: linked %q must be partner-name:serviceUserId with a known partner", u.ID, l)
			}
		}
	}
	return nil
}

func resolve(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// loadCerts reads certificates from inline PEM or a PEM file.
func loadCerts(dir, spec string) ([]*x509.Certificate, error) {
	data := []byte(spec)
	if !strings.Contains(spec, "-----BEGIN") {
		b, err := safefile.Read(resolve(dir, spec), 4<<20)
		if err != nil {
			return nil, err
		}
		data = b
	}
	certs, err := signer.ParseCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("%.40q: %w", spec, err)
	}
	return certs, nil
}

func (cfg *Config) checkDevelopers(dir string) error {
	names, keys := map[string]bool{}, map[string]bool{}
	for i := range cfg.Developers {
		d := &cfg.Developers[i]
		if d.Name == "" {
			d.Name = fmt.Sprintf("developer%d", i+1)
		}
		if names[d.Name] {
			return fmt.Errorf("developer %q appears twice", d.Name)
		}
		names[d.Name] = true
		if d.KeyFile != "" {
			b, err := safefile.Read(resolve(dir, d.KeyFile), 4096)
			if err != nil {
				return fmt.Errorf("developer %q: %w", d.Name, err)
			}
			d.Key = string(b)
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

func checkLogin(u *User, logins map[string]bool) error {
	if (u.Login == "") != (u.PasswordHash == "") {
		return fmt.Errorf("user %q: give both login and passwordHash, or neither", u.ID)
	}
	if u.Login == "" {
		return nil
	}
	if logins[strings.ToLower(u.Login)] {
		return fmt.Errorf("user %q: login %q is another user's too", u.ID, u.Login)
	}
	logins[strings.ToLower(u.Login)] = true
	if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
		return fmt.Errorf("user %q: passwordHash is not a bcrypt hash (make one with signagent-emulator --hash-password): %w", u.ID, err)
	}
	return nil
}
