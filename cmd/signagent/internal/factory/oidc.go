package factory

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/store"
)

const (
	CatOIDC  = "OpenID Connect"
	CatStore = "Shared store"
)

// OIDCFlags say which application signs in where, and where the tokens
// are kept; the agent takes them too.
func OIDCFlags() []cli.Flag {
	return append(StoreFlags(), []cli.Flag{
		&cli.StringFlag{Name: "oidc-url", Category: CatOIDC, EnvVars: []string{"SIGNAGENT_OIDC_URL"}, Usage: "the identity provider's `URL` ({auth_url}; /connect/* is below it)"},
		&cli.StringFlag{Name: "client-id", Category: CatOIDC, EnvVars: []string{"SIGNAGENT_CLIENT_ID"}, Usage: "the application's `CLIENT_ID`"},
		cmdutil.ClientSecretSecret.FlagWith(CatOIDC, ""),
		TokenStoreFlag(),
		&cli.DurationFlag{Name: "refresh-before", Category: CatOIDC, Value: oidc.DefaultRefreshBefore, EnvVars: []string{"SIGNAGENT_REFRESH_BEFORE"}, Usage: "refresh an access token with less than `DURATION` left (or an eighth of its lifetime, when shorter)"},
		&cli.BoolFlag{Name: "insecure-http", Category: CatOIDC, EnvVars: []string{"SIGNAGENT_INSECURE_HTTP"}, Usage: "allow plain http to a non-loopback identity provider"},
		&cli.DurationFlag{Name: "request-timeout", Category: CatOIDC, Value: 15 * time.Second, EnvVars: []string{"SIGNAGENT_REQUEST_TIMEOUT"}, Usage: "give up on one request after `DURATION`"},
	}...)
}

// oidcAgentFlags are the OpenID Connect flags of commands that have
// --insecure-http and --request-timeout already (header, serve).
func oidcAgentFlags() []cli.Flag {
	var out []cli.Flag
	for _, f := range OIDCFlags() {
		if n := f.Names()[0]; n != "insecure-http" && n != "request-timeout" {
			out = append(out, f)
		}
	}
	return out
}

func OIDCHeaderFlags() []cli.Flag { return append(oidcAgentFlags(), ProfileFlag()) }

// oidcAgentConfig is the agent's OpenID Connect scheme: the token store
// operators sign in to (in shared, the agent's store, when there is one),
// and the client secret (read once; without one the agent serves fresh
// tokens and answers 503 to what needs a refresh).
func oidcAgentConfig(s *settings.Settings, e *cmdutil.Env, shared *store.Shared) (*oidc.Tokens, error) {
	records, err := oidcRecords(s, shared)
	if err != nil {
		// The local files only: a shared store is never dropped.
		e.Log.Warn().Err(err).Msg("no token store: oidc authorizations answer 503")
		return nil, nil
	}
	sec, err := ClientSecret(s)
	if err != nil {
		return nil, err
	}
	return &oidc.Tokens{Store: records, Before: s.Duration("refresh-before"), RefreshLifetime: s.Duration("refresh-token-lifetime"), Client: func(rec *oidc.Record) (*oidc.Client, error) {
		if sec == "" {
			return nil, schemes.ErrOIDCSecret
		}
		return RefreshClient(s, e, rec, sec)
	}}, nil
}

func TokenStoreFlag() cli.Flag {
	return &cli.StringFlag{Name: "token-store", Category: CatOIDC, EnvVars: []string{"SIGNAGENT_TOKEN_STORE"}, Usage: "keep the tokens in `DIR` (default $XDG_STATE_HOME/signagent, else ~/.local/state/signagent)"}
}

func ProfileFlag() cli.Flag {
	return &cli.StringFlag{Name: "profile", Category: CatOIDC, Value: "default", EnvVars: []string{"SIGNAGENT_PROFILE"}, Usage: "the token store's `NAME` for this sign-in"}
}

func Who(r *oidc.Record) string {
	if r.Email != "" {
		return fmt.Sprintf("%s (%s)", r.Subject, r.Email)
	}
	return r.Subject
}

// OIDCClient builds the client for an identity provider and application,
// with the secret from $SIGNAGENT_CLIENT_SECRET or --client-secret-file.
func OIDCClient(s *settings.Settings, e *cmdutil.Env, authURL, clientID string) (*oidc.Client, error) {
	sec, err := ClientSecret(s)
	if err != nil {
		return nil, err
	}
	return oidc.New(oidc.Config{AuthURL: authURL, AllowInsecureHTTP: s.Bool("insecure-http"), ClientID: clientID,
		ClientSecret: sec, Space: s.String("space"), ExtraScopes: s.Strings("scope"), RedirectURI: s.String("redirect-uri"),
		Timeout: s.Duration("request-timeout"), Log: e.Log})
}

// ClientSecret reads the client secret (see secretSpec for the order of
// its sources); none is not an error here: oidc.New says what to give.
func ClientSecret(s *settings.Settings) (string, error) {
	if !cmdutil.ClientSecretSecret.Source(s).Given() {
		return "", nil
	}
	return cmdutil.ClientSecretSecret.Read(s, oidc.CheckSecret, errdefs.ErrInvalidInput)
}

// OIDCTokens hands out the profiles' tokens, refreshing with a client for
// the provider and application each profile signed in with; their records
// are in shared, the store the command opened (OpenStore), when there is
// one, else in the files.
func OIDCTokens(s *settings.Settings, e *cmdutil.Env, shared *store.Shared) (*oidc.Tokens, error) {
	records, err := oidcRecords(s, shared)
	if err != nil {
		return nil, err
	}
	return &oidc.Tokens{Store: records, Before: s.Duration("refresh-before"), Client: func(rec *oidc.Record) (*oidc.Client, error) {
		sec, err := ClientSecret(s)
		if err != nil {
			return nil, err
		}
		return RefreshClient(s, e, rec, sec)
	}}, nil
}

// RefreshClient is the client that refreshes rec: its provider and
// client_id; a different --oidc-url or --client-id is a mistake.
func RefreshClient(s *settings.Settings, e *cmdutil.Env, rec *oidc.Record, sec string) (*oidc.Client, error) {
	for _, f := range []struct{ flag, want string }{{"oidc-url", rec.AuthURL}, {"client-id", rec.ClientID}} {
		if v := s.String(f.flag); v != "" && strings.TrimRight(v, "/") != f.want {
			return nil, fmt.Errorf("%w: profile %q was signed in with --%s %s, not %s; sign in again to change it",
				errdefs.ErrInvalidInput, rec.Profile, f.flag, f.want, v)
		}
	}
	space := rec.Space()
	if space == "" {
		space = oidc.SpaceStaging // a refresh sends no scope
	}
	return oidc.New(oidc.Config{AuthURL: rec.AuthURL, AllowInsecureHTTP: s.Bool("insecure-http"), ClientID: rec.ClientID,
		ClientSecret: sec, Space: space, Timeout: s.Duration("request-timeout"), Log: e.Log})
}

func OIDCToken(c *cli.Context, e *cmdutil.Env) (*oidc.Record, error) {
	s := settings.Of(c)
	shared, err := OpenStore(s)
	if err != nil {
		return nil, err
	}
	if shared != nil {
		defer shared.Close()
	}
	tk, err := OIDCTokens(s, e, shared)
	if err != nil {
		return nil, err
	}
	rec, cached, err := tk.Token(c.Context, s.String("profile"))
	if err != nil {
		return nil, err
	}
	e.Log.Debug().Object("tokens", rec).Bool("cached", cached).Msg("access token")
	return rec, nil
}
