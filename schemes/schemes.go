// Package schemes is the one list of the authentication schemes signagent
// serves, and how each is built: from its settings (what the command
// read from the flags, environment and configuration file) and what the
// caller lends it (Deps: the token's decrypter, the shared store, the
// trusted sessions, the log, a refresh hook). The agent (serve) and the
// CLI's api and header commands all build their authz.Schemes here, so a
// scheme is wired in once: its package implementing authz.Scheme, one
// Entry in List, and its field in Settings when it has settings.
//
// It sits below the agent and the command and above the scheme packages
// (legacy, oidc; trusted authentication is legacy by auth.sid, lent by
// the caller as Deps.Sid).
package schemes

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/store"
)

// Entry is one scheme of the list: its name, what the agent counts of it,
// and how it is built.
type Entry struct {
	// Name is the selector's scheme (authz.Selector.Scheme).
	Name string
	// Sources are where its header values come from, as authz.Header's
	// Source says: the agent's metrics count each from zero.
	Sources []string
	// Refreshes, when set, says what the scheme refreshes (for the help
	// of signagent_NAME_refreshes_total{result}, counted through
	// Deps.Refreshed); empty: it refreshes nothing.
	Refreshes string
	// Help says, for the --scheme of signagent api and header, what names
	// one of its identities (the flags); empty: the name alone.
	Help string
	// Build makes the scheme of s with what the caller lends; a scheme s
	// does not configure is authz.Off, saying what it lacks. An error is
	// a configuration the scheme cannot run with.
	Build func(s Settings, d Deps) (authz.Scheme, error)
}

// List is every scheme signagent has, in the order a caller names them.
func List() []Entry {
	return []Entry{
		{Name: authz.SchemeLegacy, Sources: []string{"memory", "store", "login"}, Help: "--by password|certificate|sid", Build: Legacy},
		{Name: authz.SchemeOIDC, Sources: []string{"memory", "store", "refresh"}, Help: "a signed-in --profile",
			Refreshes: "OpenID Connect access-token refreshes", Build: OIDC},
	}
}

// Settings are the schemes' settings, read by the command; a scheme whose
// field is nil is off.
type Settings struct {
	// Legacy is the legacy scheme's client and accounts.
	Legacy *LegacySettings
	// OIDC is where the profiles operators signed in with signagent
	// login are kept and how they are refreshed; the scheme builds its
	// cache of tokens from it.
	OIDC *OIDCSettings
	// Off says why a scheme is off, by name, where the command knows it
	// better than "not configured" (a client it could not make).
	Off map[string]error
}

// OIDCSettings are the OpenID Connect scheme's: the records of the
// signed-in profiles (local files or a shared store) and how a profile's
// tokens are refreshed. OIDC builds the tokens' cache (oidc.Tokens) from
// them.
type OIDCSettings struct {
	// Records keep the profiles' records.
	Records oidc.Records
	// Client is the client that refreshes rec (its provider and
	// client_id, with the configured secret).
	Client func(rec *oidc.Record) (*oidc.Client, error)
	// Before is how much life an access token must have left to be used
	// (0: oidc.Tokens' default).
	Before time.Duration
	// RefreshLifetime is how long a refresh token lasts (0:
	// oidc.DefaultRefreshLifetime).
	RefreshLifetime time.Duration
}

// Deps are what the caller (the agent, or a command) lends the schemes;
// any may be absent, and a scheme that needs it then says so when used.
type Deps struct {
	// Decrypter is the token's key that opens a certificate login's
	// challenge, with its certificate (the token opened when asked).
	// NoDecrypter is why there is none when Decrypter is nil.
	Decrypter   func() (*x509.Certificate, crypto.Decrypter, error)
	NoDecrypter error
	// Sid is the auth.sid for a selector by sid that carries none: from
	// the trusted sessions (the agent) or the command's flags.
	Sid func(sel authz.Selector) (Sid, error)
	// Password is a login's password (the command's sources and prompt);
	// nil: the settings' accounts only.
	Password func(login string) (string, error)
	// Store is the shared store the schemes keep their records in beside
	// memory (nil: memory only).
	Store store.Records
	Log   zerolog.Logger
	// Timeout bounds one login or refresh for all who wait on it.
	Timeout time.Duration
	// Refreshed, when set, is told each refresh's outcome: "ok",
	// "refused" (sign in again) or "error".
	Refreshed func(scheme, identity, result string)
	// CertLogin, when set, is told of every certificate login (the
	// audit log and the metrics).
	CertLogin func(legacy.CertLogin)
	// Was are the schemes this build replaces (a reload): a scheme whose
	// settings did not change keeps its cache.
	Was authz.Schemes
}

// Sid is a trusted user's auth.sid as the caller lends it.
type Sid struct {
	// Subject names the user without a secret (a credential masked).
	Subject string
	// CacheKey keys the scheme's cache when Subject, masked, could name
	// two users; never logged.
	CacheKey string
	// Get obtains the auth.sid (a trusted authentication on the token,
	// or one read from a file).
	Get func(ctx context.Context) (string, error)
	// Drop forgets an auth.sid the service no longer takes, and says
	// whether Get will give another (nil: it will not).
	Drop func() bool
}

// Checker is a scheme that can say whether it can serve now: the agent's
// /readyz asks each that is one, under the scheme's name.
type Checker interface {
	Check() error
}

// Expirer is a scheme whose identities must sign in again at a time it
// can tell (OpenID Connect profiles: their refresh tokens' expiry): the
// agent's metrics export it by identity.
type Expirer interface {
	RefreshExpiries() map[string]time.Time
}

// Build builds each scheme of list (nil: List()) with s and d, in order.
func Build(list []Entry, s Settings, d Deps) (authz.Schemes, error) {
	if list == nil {
		list = List()
	}
	out := make(authz.Schemes, 0, len(list))
	for _, e := range list {
		sc, err := e.Build(s, d)
		if err != nil {
			return nil, fmt.Errorf("the %s scheme: %w", e.Name, err)
		}
		out = append(out, sc)
	}
	return out, nil
}

// off is the scheme name when s does not configure it: the command's
// reason, else what.
func (s Settings) off(name string, what error) authz.Scheme {
	if err := s.Off[name]; err != nil {
		return authz.Off(name, err)
	}
	return authz.Off(name, what)
}

// was is the scheme named name among d.Was.
func (d Deps) was(name string) authz.Scheme {
	for _, s := range d.Was {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// errOIDCNotConfigured answers OpenID Connect when the settings have no
// token store.
var errOIDCNotConfigured = errdefs.New(errdefs.ErrNotConfigured, "the OpenID Connect scheme is not configured in this agent")

// ErrOIDCSecret is what a profile that needs a refresh gets when the
// caller has no client secret.
var ErrOIDCSecret = errdefs.New(errdefs.ErrNotConfigured, "the agent has no OpenID Connect client secret (SIGNAGENT_CLIENT_SECRET or --client-secret-file), so it cannot refresh tokens")

// OIDC is a profile's Bearer header from the records of s.OIDC,
// refreshed ahead of expiry: its cache of tokens is built here, and on a
// reload takes over the one it replaces.
func OIDC(s Settings, d Deps) (authz.Scheme, error) {
	was, _ := d.was(authz.SchemeOIDC).(oidcScheme)
	if s.OIDC == nil {
		if was.Tokens != nil {
			was.Tokens.Close() // its writer of unsaved records ends
		}
		return s.off(authz.SchemeOIDC, errOIDCNotConfigured), nil
	}
	t := &oidc.Tokens{Store: s.OIDC.Records, Client: s.OIDC.Client, Before: s.OIDC.Before, RefreshLifetime: s.OIDC.RefreshLifetime}
	if was.Tokens != nil {
		// A reload: the refreshed records the store has not taken yet
		// (and their leases) are the new Tokens' now; the old one's
		// writer ends.
		t.TakeOver(was.Tokens)
	}
	if t.Timeout <= 0 {
		t.Timeout = d.Timeout
	}
	if f := d.Refreshed; f != nil {
		t.OnRefresh = func(profile, result string) { f(authz.SchemeOIDC, profile, result) }
	}
	return oidcScheme{oidc.Scheme{Tokens: t}}, nil
}

// oidcScheme says whether its token store can be used: the local files
// say; a shared one is the store's check, not the scheme's.
type oidcScheme struct{ oidc.Scheme }

func (s oidcScheme) Check() error { return s.Tokens.Store.Check() }
