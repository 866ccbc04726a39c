package factory

import (
	"fmt"
	"strings"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/store"
)

// oidcAgentConfig is the agent's OpenID Connect scheme: the token store
// operators sign in to (in shared, the agent's store, when there is one),
// and the client secret (read once; without one the agent serves fresh
// tokens and answers 503 to what needs a refresh).
func oidcAgentConfig(s *settings.Settings, e *cmdutil.Env, shared *store.Shared) (*schemes.OIDCSettings, error) {
	records, err := oidcRecords(s, shared)
	if err != nil {
		// The local files only: a shared store is never dropped.
		e.Log.Warn().Err(err).Msg("no token store: oidc authorizations answer 503")
		return nil, nil
	}
	sec, err := clientSecret(s)
	if err != nil {
		return nil, err
	}
	return &schemes.OIDCSettings{Records: records, Before: cmdutil.ReadOIDC(s).RefreshBefore, RefreshLifetime: s.Duration("refresh-token-lifetime"), Client: func(rec *oidc.Record) (*oidc.Client, error) {
		if sec == "" {
			return nil, schemes.ErrOIDCSecret
		}
		return refreshClient(s, e, rec, sec)
	}}, nil
}

// Who names a profile's user: the subject, with the e-mail when known.
func Who(r *oidc.Record) string {
	if r.Email != "" {
		return fmt.Sprintf("%s (%s)", r.Subject, r.Email)
	}
	return r.Subject
}

// OIDCClient builds the client of a sign-in (cfg: the identity provider,
// the application, the space, the scopes and the redirect), with the
// service flags' --insecure-http and --request-timeout and the secret
// from $SIGNAGENT_CLIENT_SECRET or --client-secret-file.
func (f *Factory) OIDCClient(cfg oidc.Config) (*oidc.Client, error) {
	sec, err := f.ClientSecret()
	if err != nil {
		return nil, err
	}
	svc := cmdutil.ReadService(f.Settings())
	cfg.AllowInsecureHTTP, cfg.ClientSecret, cfg.Timeout, cfg.Log = svc.InsecureHTTP, sec, svc.RequestTimeout, f.Log
	return oidc.New(cfg)
}

// ClientSecret reads the client secret (see secretSpec for the order of
// its sources); none is not an error here: oidc.New says what to give.
func (f *Factory) ClientSecret() (string, error) { return clientSecret(f.Settings()) }

// clientSecret is ClientSecret from s.
func clientSecret(s *settings.Settings) (string, error) {
	if !cmdutil.ClientSecretSpec.Source(s).Given() {
		return "", nil
	}
	return cmdutil.ClientSecretSpec.Read(s, oidc.CheckSecret, errdefs.ErrInvalidInput)
}

// OIDCTokens hands out the profiles' tokens, refreshing with a client for
// the provider and application each profile signed in with; their records
// are in the run's store (Store), when there is one, else in the files.
// Built once; closed with the factory.
func (f *Factory) OIDCTokens() (*oidc.Tokens, error) {
	set, err := f.oidcSettings()
	if err != nil {
		return nil, err
	}
	return f.tokens.get(&f.mu, func() (*oidc.Tokens, error) {
		return &oidc.Tokens{Store: set.Records, Before: set.Before, Client: set.Client}, nil
	})
}

// oidcSettings are the OpenID Connect scheme's settings for a command:
// the records in the run's store or the files, and a refresh client made
// for each profile's provider and application.
func (f *Factory) oidcSettings() (*schemes.OIDCSettings, error) {
	records, err := f.OIDCRecords()
	if err != nil {
		return nil, err
	}
	return &schemes.OIDCSettings{Records: records, Before: cmdutil.ReadOIDC(f.Settings()).RefreshBefore, Client: func(rec *oidc.Record) (*oidc.Client, error) {
		sec, err := f.ClientSecret()
		if err != nil {
			return nil, err
		}
		return f.RefreshClient(rec, sec)
	}}, nil
}

// RefreshClient is the client that refreshes rec: its provider and
// client_id; a different --oidc-url or --client-id is a mistake.
func (f *Factory) RefreshClient(rec *oidc.Record, sec string) (*oidc.Client, error) {
	return refreshClient(f.Settings(), f.Env, rec, sec)
}

// refreshClient is RefreshClient with the settings s.
func refreshClient(s *settings.Settings, e *cmdutil.Env, rec *oidc.Record, sec string) (*oidc.Client, error) {
	o := cmdutil.ReadOIDC(s)
	for _, f := range []struct{ flag, given, want string }{{"oidc-url", o.URL, rec.AuthURL}, {"client-id", o.ClientID, rec.ClientID}} {
		if v := f.given; v != "" && strings.TrimRight(v, "/") != f.want {
			return nil, fmt.Errorf("%w: profile %q was signed in with --%s %s, not %s; sign in again to change it",
				errdefs.ErrInvalidInput, rec.Profile, f.flag, f.want, v)
		}
	}
	space := rec.Space()
	if space == "" {
		space = oidc.SpaceStaging // a refresh sends no scope
	}
	svc := cmdutil.ReadService(s)
	return oidc.New(oidc.Config{AuthURL: rec.AuthURL, AllowInsecureHTTP: svc.InsecureHTTP, ClientID: rec.ClientID,
		ClientSecret: sec, Space: space, Timeout: svc.RequestTimeout, Log: e.Log})
}
