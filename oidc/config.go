// Package oidc signs a user in to the service's OpenID Connect identity
// provider (device and authorization-code flows), refreshes the access
// token and keeps the tokens in a per-profile store.
//
// It builds on golang.org/x/oauth2 and github.com/coreos/go-oidc/v3 and
// covers what they leave to the caller for this provider: the
// device-authorization request is this package's, with client_secret and
// the caller's context (x/oauth2's sends neither); the client
// credentials go in the form body, once per request (x/oauth2's default
// probes Basic first, two requests per poll, which the provider answers
// slow_down); the device-code poll loop is this package's (x/oauth2 polls
// on a fixed ticker and reports an expired code as a context error; here
// each wait starts after the previous answer and expiry is
// expired_token); the id_token's nonce is checked (go-oidc does not), and
// after a refresh it may be absent or equal.
package oidc

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// Spaces and their scopes (specification 2.2).
const (
	SpaceStaging    = "staging"
	SpaceProduction = "production"
	ScopeStaging    = "Service.PublicAPI.Staging"
	ScopeProduction = "Service.PublicAPI"
)

// BaseScopes are requested on every sign-in, with the space's scope.
var BaseScopes = []string{"openid", "profile", "email", "offline_access"}

// Defaults.
const (
	DefaultRefreshBefore = 60 * time.Second
	DefaultTimeout       = 30 * time.Second
)

// Config is what a sign-in or a refresh needs.
type Config struct {
	// AuthURL is the identity provider's address ({auth_url}); plain http
	// only to loopback unless AllowInsecureHTTP.
	AuthURL           string
	AllowInsecureHTTP bool
	ClientID          string
	ClientSecret      string
	// Space is staging or production; it picks the service scope.
	Space string
	// ExtraScopes are requested besides the default ones.
	ExtraScopes []string
	// RedirectURI is the address registered in the integrator's cabinet
	// (the code flow).
	RedirectURI string
	HTTPClient  *http.Client // nil: a default one; redirects are never followed
	// Timeout bounds each exchange with the provider, its answer's body
	// included, the key set's too (default 30 s).
	Timeout time.Duration
	Now     func() time.Time
	Log     zerolog.Logger
}

// SpaceScope is the service scope of a space.
func SpaceScope(space string) (string, error) {
	switch space {
	case SpaceStaging:
		return ScopeStaging, nil
	case SpaceProduction:
		return ScopeProduction, nil
	}
	return "", fmt.Errorf("%w: space %q: want staging or production", errdefs.ErrInvalidInput, space)
}

// SpaceOf names the space a list of scopes grants ("" when none).
func SpaceOf(scopes []string) string {
	switch {
	case slices.Contains(scopes, ScopeProduction):
		return SpaceProduction
	case slices.Contains(scopes, ScopeStaging):
		return SpaceStaging
	}
	return ""
}

var scopeRe = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]+$`) // RFC 6749 scope-token

// Scopes is the scope a sign-in requests: the base scopes, the space's
// and the extra ones, each once, in that order.
func (c Config) Scopes() ([]string, error) {
	space, err := SpaceScope(c.Space)
	if err != nil {
		return nil, err
	}
	out := append(slices.Clone(BaseScopes), space)
	for _, s := range c.ExtraScopes {
		for _, f := range strings.Fields(s) {
			if !scopeRe.MatchString(f) {
				return nil, fmt.Errorf("%w: scope %q is not a scope token", errdefs.ErrInvalidInput, f)
			}
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out, nil
}

func (c *Config) check() error {
	if strings.TrimSpace(c.ClientID) == "" {
		return fmt.Errorf("%w: give the client_id with --client-id or SIGNAGENT_CLIENT_ID", errdefs.ErrInvalidInput)
	}
	if c.ClientSecret == "" {
		return fmt.Errorf("%w: give the client secret in SIGNAGENT_CLIENT_SECRET or a file named by --client-secret-file", errdefs.ErrInvalidInput)
	}
	if strings.TrimSpace(c.AuthURL) == "" {
		return fmt.Errorf("%w: give the identity provider's address with --oidc-url or SIGNAGENT_OIDC_URL", errdefs.ErrInvalidInput)
	}
	if _, err := httpx.ParseBaseURL(c.AuthURL, c.AllowInsecureHTTP); err != nil {
		return fmt.Errorf("%w: --oidc-url: %w", errdefs.ErrInvalidInput, err)
	}
	if _, err := c.Scopes(); err != nil {
		return err
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// CheckSecret refuses a client secret that cannot be one (empty, or with
// control characters); the secret is not shown.
func CheckSecret(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", fmt.Errorf("%w: the client secret is empty", errdefs.ErrInvalidInput)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "", fmt.Errorf("%w: the client secret holds control characters", errdefs.ErrInvalidInput)
	}
	return s, nil
}
