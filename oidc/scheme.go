package oidc

import "github.com/signagent/signagent/authz"

// Scheme is the OpenID Connect scheme as an authz.Scheme: a selector's
// profile ("default" when it names none), signed in with signagent oidc login,
// its access token from Tokens.
type Scheme struct{ Tokens *Tokens }

// Name is authz.SchemeOIDC.
func (s Scheme) Name() string { return authz.SchemeOIDC }

// Authorizer resolves a checked OpenID Connect selector.
func (s Scheme) Authorizer(sel authz.Selector) (authz.Authorizer, error) {
	profile := sel.Profile
	if profile == "" {
		profile = "default"
	}
	if err := CheckProfile(profile); err != nil {
		return nil, err
	}
	return s.Tokens.For(profile), nil
}
