package oidccmd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/oidc"
)

func tokenCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Description: cmdutil.SecretOutput("the access token") + cmdutil.Examples("curl -H \"Authorization: Bearer $(signagent oidc token)\" URL", "signagent oidc token --json"),
		Name:        "token",
		Usage:       "print the profile's access token, refreshed when it has less than --refresh-before left",
		UsageText:   "curl -H \"Authorization: Bearer $(signagent oidc token)\" ...",
		Flags:       cmdutil.Concat(oidcFlags(), []cli.Flag{cmdutil.ProfileFlag(), cmdutil.JSONFlag(`{"accessToken","expiresAt","profile"}`)}, factory.AgentUseFlags()),
		Action: func(c *cli.Context) error {
			if err := cmdutil.NoArgs(c); err != nil { // not in main's Before: "check" is an argument there
				return err
			}
			return runToken(c.Context, f, readProfile(c))
		},
	}
}

// profileOptions are what token, status and logout are told: the
// profile, and each its own switches.
type profileOptions struct {
	Profile string
	JSON    bool
	// All: status lists every profile of the local token store.
	All bool
	// LocalOnly: logout removes the tokens without asking the provider
	// to revoke the refresh token.
	LocalOnly bool
}

// readProfile reads the profile's flags (a command's missing switches
// read false).
func readProfile(c *cli.Context) profileOptions {
	return profileOptions{Profile: cmdutil.ReadProfile(settings.Of(c)), JSON: c.Bool("json"), All: c.Bool("all"), LocalOnly: c.Bool("local-only")}
}

// runToken prints the profile's access token, from the running agent or
// the token store here.
func runToken(ctx context.Context, f *factory.Factory, o profileOptions) error {
	rec, err := oidcTokenHereOrAgent(ctx, f, o.Profile)
	if err != nil {
		return err
	}
	if o.JSON {
		return cmdutil.WriteJSON(f.Env, map[string]any{"accessToken": rec.AccessToken, "expiresAt": cmdutil.JSONTime(rec.Expiry), "profile": rec.Profile})
	}
	_, err = fmt.Fprintln(f.Stdout, rec.AccessToken)
	return err
}

// oidcTokenHereOrAgent is the profile's token from the running agent, when
// one is asked (its record holds the access token and expiry only), else
// from the token store here.
func oidcTokenHereOrAgent(ctx context.Context, f *factory.Factory, profile string) (*oidc.Record, error) {
	cl, err := f.Agent()
	if err != nil || cl == nil {
		if err != nil {
			return nil, err
		}
		return oidcToken(ctx, f, profile)
	}
	resp, err := f.AgentAuthorization(ctx, cl, agentapi.AuthorizationRequest{Scheme: authz.SchemeOIDC, Profile: profile})
	if err != nil {
		return nil, err
	}
	tok, ok := strings.CutPrefix(resp.Authorization, "Bearer ")
	if !ok {
		return nil, errdefs.Mark(errors.New("the agent's OpenID Connect header is not a bearer token"), errdefs.ErrUnreachable)
	}
	return &oidc.Record{Profile: profile, AccessToken: tok, Expiry: resp.ExpiresAt.Time}, nil
}

func statusCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Description: cmdutil.Examples("signagent oidc status", "signagent oidc status --json"),
		Name:        "status",
		Usage:       "show who the profile is signed in as, the scopes and space, and when the tokens expire (no token is shown)",
		Flags: cmdutil.Concat([]cli.Flag{cmdutil.ProfileFlag()}, cmdutil.Pick(cmdutil.OIDCFlags(), "token-store"), []cli.Flag{
			&cli.BoolFlag{Name: "all", Category: cmdutil.CatOIDC, Usage: "every profile of the local token store, one line each (--json: a list)"},
			&cli.BoolFlag{Name: "json", Category: cmdutil.CatOutput, Usage: "print it as JSON"}}, cmdutil.StoreFlags()),
		Action: func(c *cli.Context) error { return runStatus(f, readProfile(c)) },
	}
}

// runStatus says who the profile (or, with All, each local profile) is
// signed in as; no token is shown.
func runStatus(f *factory.Factory, o profileOptions) error {
	store, err := f.OIDCRecords()
	if err != nil {
		return err
	}
	if o.All {
		return statusAll(f.Env, store, o.JSON)
	}
	rec, err := store.Load(o.Profile)
	if errors.Is(err, oidc.ErrSignIn) && o.JSON {
		// Signed out is an answer, not a failure, for a script that
		// asks: exit 0 with signedIn false and why.
		return cmdutil.WriteJSON(f.Env, map[string]any{"profile": o.Profile, "signedIn": false, "reason": err.Error()})
	}
	if err != nil {
		return err
	}
	return printStatus(f.Env, rec, o.JSON)
}

func printStatus(e *cmdutil.Env, r *oidc.Record, asJSON bool) error {
	now := time.Now()
	if asJSON {
		v := map[string]any{"profile": r.Profile, "signedIn": true, "subject": r.Subject, "email": r.Email, "name": r.Name,
			"space": r.Space(), "scopes": r.Scopes, "authUrl": r.AuthURL, "clientId": r.ClientID,
			"accessTokenExpiresAt": cmdutil.JSONTime(r.Expiry), "accessTokenValid": now.Before(r.Expiry),
			"refreshToken": r.RefreshToken != "", "signedInAt": cmdutil.JSONTime(r.SignedInAt)}
		if !r.RefreshedAt.IsZero() {
			v["refreshedAt"] = cmdutil.JSONTime(r.RefreshedAt)
		}
		return cmdutil.WriteJSON(e, v)
	}
	left := "expired"
	if now.Before(r.Expiry) {
		left = "valid for " + r.Expiry.Sub(now).Round(time.Second).String()
	}
	refresh := "none (offline_access not granted): sign in again when the access token expires"
	if r.RefreshToken != "" {
		refresh = "held; it is refreshed when under --refresh-before is left"
	}
	fmt.Fprintf(e.Stdout, "profile:       %s\nsigned in as:  %s\nname:          %s\nspace:         %s\nscopes:        %s\n"+
		"provider:      %s (client %s)\naccess token:  %s (expires %s)\nrefresh token: %s\nsigned in at:  %s\n",
		r.Profile, factory.Who(r), r.Name, r.Space(), strings.Join(r.Scopes, " "), r.AuthURL, r.ClientID, left,
		r.Expiry.Local().Format(time.DateTime), refresh, r.SignedInAt.Local().Format(time.DateTime))
	return nil
}

func logoutCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Description: "The provider is asked to revoke the refresh token first (RFC 7009, when its discovery document\n" +
			"publishes a revocation endpoint), as oidc-agent does, so that a copy of it is worth nothing; when it cannot\n" +
			"be asked, nothing is removed and the command fails: --local-only removes the tokens here without asking.\n\n" +
			cmdutil.Examples("signagent oidc logout --profile robot", "signagent oidc logout --local-only"),
		Name:  "logout",
		Usage: "revoke the profile's refresh token at the provider and remove its tokens from the token store",
		Flags: cmdutil.Concat(oidcFlags(), []cli.Flag{cmdutil.ProfileFlag(),
			&cli.BoolFlag{Name: "local-only", Category: cmdutil.CatOIDC, Usage: "remove the tokens here without asking the provider to revoke the refresh token"}}),
		Action: func(c *cli.Context) error { return runLogout(c.Context, f, readProfile(c)) },
	}
}

// runLogout revokes the profile's refresh token at the provider (unless
// LocalOnly) and removes its tokens from the store.
func runLogout(ctx context.Context, f *factory.Factory, o profileOptions) error {
	e := f.Env
	store, err := f.OIDCRecords()
	if err != nil {
		return err
	}
	profile := o.Profile
	if err := oidc.CheckProfile(profile); err != nil {
		return err
	}
	revoked := ""
	if !o.LocalOnly {
		rec, err := store.Load(profile)
		switch {
		case errors.Is(err, oidc.ErrSignIn):
			// Nothing to revoke; removed below if a record is there at all.
		case err != nil:
			return fmt.Errorf("%w (signagent oidc logout --local-only removes it without asking the provider)", err)
		default:
			sec, err := f.ClientSecret()
			if err != nil {
				return err
			}
			client, err := f.RefreshClient(rec, sec)
			if err != nil {
				return err
			}
			ok, err := client.Revoke(ctx, rec)
			if err != nil {
				return fmt.Errorf("the refresh token of profile %s was not revoked and nothing was removed: %w (signagent oidc logout --local-only removes the tokens here without asking)", profile, err)
			}
			revoked = "; the provider publishes no revocation endpoint: the refresh token stays valid there until it expires"
			if ok {
				revoked = "; the provider revoked the refresh token"
			}
		}
	}
	removed, err := store.Remove(profile)
	if err != nil {
		return err
	}
	if removed {
		fmt.Fprintf(e.Stdout, "Signed out: the tokens of profile %s are removed%s.\n", profile, revoked)
	} else {
		fmt.Fprintf(e.Stdout, "Profile %s was not signed in.\n", profile)
	}
	return nil
}

// statusAll lists every profile of the local token store with its state,
// as gh auth status lists its hosts.
func statusAll(e *cmdutil.Env, store oidc.Records, asJSON bool) error {
	local, ok := store.(oidc.Files)
	if !ok {
		return cmdutil.UsageErr(errors.New("--all lists the local token store's profiles; a shared store is asked one profile at a time (--profile)"))
	}
	names, err := local.Profiles()
	if err != nil {
		return err
	}
	type row struct {
		Profile   string `json:"profile"`
		SignedIn  bool   `json:"signedIn"`
		Subject   string `json:"subject,omitempty"`
		Space     string `json:"space,omitempty"`
		ExpiresAt string `json:"expiresAt,omitempty"`
		Refresh   bool   `json:"refreshToken"`
		Reason    string `json:"reason,omitempty"`
	}
	rows := []row{}
	for _, n := range names {
		r := row{Profile: n}
		if rec, err := local.Load(n); err != nil {
			r.Reason = err.Error()
		} else {
			r.SignedIn, r.Subject, r.Space, r.ExpiresAt, r.Refresh = true, factory.Who(rec), rec.Space(), cmdutil.JSONTime(rec.Expiry), rec.RefreshToken != ""
		}
		rows = append(rows, r)
	}
	if asJSON {
		return cmdutil.WriteJSON(e, rows)
	}
	w := cmdutil.Table(e, len(rows), "No profile is signed in (signagent oidc login).", "PROFILE\tSIGNED IN AS\tSPACE\tACCESS TOKEN EXPIRES\tREFRESH TOKEN")
	if w == nil {
		return nil
	}
	for _, r := range rows {
		if !r.SignedIn {
			fmt.Fprintf(w, "%s\t-\t-\t-\t%s\n", r.Profile, r.Reason)
			continue
		}
		refresh := "yes"
		if !r.Refresh {
			refresh = "no"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.Profile, r.Subject, r.Space, r.ExpiresAt, refresh)
	}
	return w.Flush()
}

// oidcToken is the profile's access token from the token store here,
// refreshed when it has less than --refresh-before left.
func oidcToken(ctx context.Context, f *factory.Factory, profile string) (*oidc.Record, error) {
	tk, err := f.OIDCTokens()
	if err != nil {
		return nil, err
	}
	rec, cached, err := tk.Token(ctx, profile)
	if err != nil {
		return nil, err
	}
	f.Log.Debug().Object("tokens", rec).Bool("cached", cached).Msg("access token")
	return rec, nil
}
