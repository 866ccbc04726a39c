// Package directory is what every side of the emulator knows of the
// service's world: its partners (trusted systems), its users and their
// credentials, and the organizations with their boxes. It is read from the
// configuration and checked once; the sides only read it.
package directory

import (
	"bytes"
	"crypto/sha1"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/emulator/kit"
	"github.com/signagent/signagent/signer"
)

// Directory is the service's partners, users and organizations.
type Directory struct {
	Partners      []Partner
	Users         []User
	Organizations []Organization
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

// Organization is an organization of the service, with its boxes.
type Organization struct {
	ID        string `yaml:"id"`
	Inn       string `yaml:"inn"`
	Kpp       string `yaml:"kpp"`
	FullName  string `yaml:"fullName"`
	ShortName string `yaml:"shortName"`
	Boxes     []Box  `yaml:"boxes"`
}

// Box is a box of an organization: a GUID, and the domain of its older
// form <32 hex digits>@<domain>.
type Box struct {
	GUID   string `yaml:"guid"`
	Domain string `yaml:"domain"`
	Title  string `yaml:"title"`
}

// BoxID is the box's older form of id.
func (b Box) BoxID() string { return strings.ReplaceAll(b.GUID, "-", "") + "@" + b.Domain }

// NormalizeBoxID reads a box id given as a GUID (any case, with or without
// dashes or braces) or as <32 hex digits>@<domain>, and returns its 32
// lower-case hex digits.
func NormalizeBoxID(id string) (string, bool) {
	id = strings.TrimSpace(id)
	if at := strings.IndexByte(id, '@'); at >= 0 {
		if at+1 == len(id) {
			return "", false
		}
		id = id[:at]
	}
	id = strings.ToLower(strings.NewReplacer("-", "", "{", "", "}", "").Replace(id))
	if b, err := hex.DecodeString(id); err != nil || len(b) != 16 {
		return "", false
	}
	return id, true
}

// Check loads the partners' keys and certificates and checks and
// normalizes everything, in place; relative file names are relative to
// dir.
func (d *Directory) Check(dir string) error {
	if err := d.checkOrganizations(); err != nil {
		return err
	}
	names, err := d.checkPartners(dir)
	if err != nil {
		return err
	}
	return d.checkUsers(dir, names)
}

func (d *Directory) checkOrganizations() error {
	boxes := map[string]bool{}
	for i := range d.Organizations {
		o := &d.Organizations[i]
		if o.ID == "" || o.FullName == "" {
			return fmt.Errorf("organization %d: give id and fullName", i+1)
		}
		for j := range o.Boxes {
			b := &o.Boxes[j]
			n, ok := NormalizeBoxID(b.GUID)
			if !ok || strings.Contains(b.GUID, "@") {
				return fmt.Errorf("organization %q: box %q: guid must be a GUID", o.ID, b.GUID)
			}
			if boxes[n] {
				return fmt.Errorf("organization %q: box %q appears twice", o.ID, b.GUID)
			}
			boxes[n] = true
			if b.Domain == "" {
				b.Domain = "box.example"
			}
		}
	}
	for _, u := range d.Users {
		for _, b := range u.Boxes {
			if n, ok := NormalizeBoxID(b); !ok || !boxes[n] {
				return fmt.Errorf("user %q: box %q is not a box of any organization", u.ID, b)
			}
		}
	}
	return nil
}

// checkPartners loads the partners' keys and certificates; it returns
// their names.
func (d *Directory) checkPartners(dir string) (map[string]bool, error) {
	names := map[string]bool{}
	keys := map[string]bool{}
	for i := range d.Partners {
		p := &d.Partners[i]
		if p.Name == "" {
			p.Name = fmt.Sprintf("partner%d", i+1)
		}
		if names[p.Name] {
			return nil, fmt.Errorf("partner %q appears twice", p.Name)
		}
		names[p.Name] = true
		if p.APIKeyFile != "" {
			k, err := kit.ReadSecret(dir, p.APIKeyFile)
			if err != nil {
				return nil, fmt.Errorf("partner %q: %w", p.Name, err)
			}
			p.APIKey = k
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
			certs, err := kit.LoadCerts(dir, c)
			if err != nil {
				return nil, fmt.Errorf("partner %q: %w", p.Name, err)
			}
			p.certs = append(p.certs, certs...)
		}
		if len(p.CAs) > 0 {
			p.roots = x509.NewCertPool()
			for _, c := range p.CAs {
				certs, err := kit.LoadCerts(dir, c)
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
func (d *Directory) checkUsers(dir string, partners map[string]bool) error {
	ids := map[string]bool{}
	logins := map[string]bool{}
	for i := range d.Users {
		u := &d.Users[i]
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
			certs, err := kit.LoadCerts(dir, c)
			if err != nil {
				return fmt.Errorf("user %q: %w", u.ID, err)
			}
			for _, cert := range certs {
				u.Thumbprints = append(u.Thumbprints, Thumbprint(cert.Raw))
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

// Partner finds the partner with this API key (case-insensitively, as the
// service treats it: the signed text carries it lower-cased).
func (d *Directory) Partner(key string) *Partner {
	for i := range d.Partners {
		if strings.EqualFold(d.Partners[i].APIKey, key) {
			return &d.Partners[i]
		}
	}
	return nil
}

// User finds a user by id.
func (d *Directory) User(id string) *User {
	for i := range d.Users {
		if d.Users[i].ID == id {
			return &d.Users[i]
		}
	}
	return nil
}

// UsersWith returns the users a credential identifies.
func (d *Directory) UsersWith(c canonical.Credential) []User {
	var out []User
	for _, u := range d.Users {
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

// UserByThumbprint finds the user with this certificate.
func (d *Directory) UserByThumbprint(thumb string) *User {
	for i := range d.Users {
		for _, t := range d.Users[i].Thumbprints {
			if strings.EqualFold(t, thumb) {
				return &d.Users[i]
			}
		}
	}
	return nil
}

// dummyHash is a bcrypt hash of nothing anyone sends.
const dummyHash = "$2a$10$heWFk5pFmokP/qjD3GUG0OUnCCDy4xw5TZ5zSkwLHJvcERaIjxkvG"

// CheckPassword returns the user with this login and password, or nil.
// Some hash is compared even for an unknown login, so that the time taken
// does not tell which logins exist.
func (d *Directory) CheckPassword(login, password string) *User {
	var user *User
	for i := range d.Users {
		if u := &d.Users[i]; u.Login != "" && strings.EqualFold(u.Login, login) {
			user = u
		}
	}
	hash := []byte(dummyHash)
	if user != nil {
		hash = []byte(user.PasswordHash)
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil || user == nil {
		return nil
	}
	return user
}

// Trusts reports whether the signer's certificate is one the partner
// registered, or chains to one of the partner's CAs.
func (p *Partner) Trusts(v *signer.Verified, now time.Time) bool {
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

// Thumbprint is a certificate's SHA-1 in upper-case hex, as the service
// names certificates.
func Thumbprint(der []byte) string {
	sum := sha1.Sum(der)
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

// HashPassword makes the passwordHash of a user in the configuration.
func HashPassword(password []byte) (string, error) {
	h, err := bcrypt.GenerateFromPassword(bytes.TrimRight(password, "\r\n"), bcrypt.DefaultCost)
	return string(h), err
}
