package schemes

import (
	"fmt"
	"maps"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/legacy"
)

// LegacySettings are the legacy scheme's: the client (the business API's
// address and the developer key) and the accounts it may log in as.
type LegacySettings struct {
	Client *legacy.Config
	// Passwords are the accounts' passwords (login -> password), used
	// when the caller lends no Deps.Password.
	Passwords map[string]string
}

// errLegacyNotConfigured answers legacy authorizations without a client.
var errLegacyNotConfigured = errdefs.New(errdefs.ErrNotConfigured, "the legacy scheme is not configured (--business-url and the developer key)")

// Legacy is the ServiceAuth header of an identity by password, by the
// token's certificate (Deps.Decrypter) or by auth.sid (given, or lent by
// Deps.Sid), its tokens kept in memory and Deps.Store.
func Legacy(s Settings, d Deps) (authz.Scheme, error) {
	ls := s.Legacy
	if ls == nil || ls.Client == nil {
		return s.off(authz.SchemeLegacy, errLegacyNotConfigured), nil
	}
	tokens, err := legacyTokens(*ls, d)
	if err != nil {
		return nil, err
	}
	tokens.Share(d.Store)
	if d.CertLogin != nil {
		tokens.Client().Guard().Observe(d.CertLogin)
	}
	sc := &legacy.Scheme{Tokens: tokens, Password: d.Password, Certificate: d.Decrypter, CertificateOff: d.NoDecrypter}
	if sc.Password == nil {
		sc.Password = func(login string) (string, error) {
			pw, ok := ls.Passwords[login]
			if !ok {
				return "", fmt.Errorf("%w: no password for login %q in the agent's configuration (--legacy-password-file LOGIN=FILE)", errdefs.ErrInvalidInput, login)
			}
			return pw, nil
		}
	}
	if sid := d.Sid; sid != nil {
		sc.SidIdentity = func(sel authz.Selector) (legacy.Identity, error) {
			got, err := sid(sel)
			if err != nil {
				return legacy.Identity{}, err
			}
			return legacy.Identity{By: legacy.BySid, Subject: got.Subject, CacheKey: got.CacheKey, Sid: got.Get, Drop: got.Drop}, nil
		}
	}
	return &legacyScheme{Scheme: sc, settings: *ls}, nil
}

// legacyTokens is the token cache for ls: the one d.Was has when ls did
// not change (a reload that did not touch it keeps its tokens), else new.
func legacyTokens(ls LegacySettings, d Deps) (*legacy.Tokens, error) {
	if was, ok := d.was(authz.SchemeLegacy).(*legacyScheme); ok && sameLegacy(was.settings, ls) {
		return was.Tokens, nil
	}
	lc := *ls.Client
	lc.Log = d.Log
	if was, ok := d.was(authz.SchemeLegacy).(*legacyScheme); ok {
		// New settings, the same certificates: the key transports opened
		// and the waits after failures are kept.
		lc.Guard = was.Tokens.Client().Guard()
	}
	c, err := legacy.New(lc)
	if err != nil {
		return nil, err
	}
	return legacy.NewTokens(c, 0, d.Timeout), nil
}

// legacyScheme is the legacy scheme with the settings it was built from.
type legacyScheme struct {
	*legacy.Scheme
	settings LegacySettings
}

// Check: a configured legacy scheme can always serve (its logins say
// otherwise, one by one).
func (*legacyScheme) Check() error { return nil }

func sameLegacy(x, y LegacySettings) bool {
	a, b := x.Client, y.Client
	return a != nil && b != nil && a.APIURL == b.APIURL && a.AllowInsecureHTTP == b.AllowInsecureHTTP &&
		a.DeveloperKey == b.DeveloperKey && a.TokenTTL == b.TokenTTL && a.ChallengeSize == b.ChallengeSize && a.Timeout == b.Timeout && a.Attempts == b.Attempts &&
		maps.Equal(x.Passwords, y.Passwords)
}
