package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/settings"
	"github.com/signagent/signagent/oidc"
)

func tokenCommand(e *env) *cli.Command {
	return &cli.Command{
		Description: examples("curl -H \"Authorization: Bearer $(signagent token)\" URL", "signagent token --json"),
		Name:        "token",
		Usage:       "print the profile's access token, refreshed when it has less than --refresh-before left",
		UsageText:   "curl -H \"Authorization: Bearer $(signagent token)\" ...",
		Flags:       concat(oidcFlags(), []cli.Flag{profileFlag(), jsonFlag(`{"accessToken","expiresAt","profile"}`)}, agentUseFlags()),
		Subcommands: []*cli.Command{tokenCheckCommand(e)}, // the PKCS#11 token's self-test
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil { // not in main's Before: "check" is an argument there
				return err
			}
			rec, err := oidcTokenHereOrAgent(c, e)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(e, map[string]any{"accessToken": rec.AccessToken, "expiresAt": jsonTime(rec.Expiry), "profile": rec.Profile})
			}
			_, err = fmt.Fprintln(e.stdout, rec.AccessToken)
			return err
		},
	}
}

// oidcTokenHereOrAgent is the profile's token from the running agent, when
// one is asked (its record holds the access token and expiry only), else
// from the token store here.
func oidcTokenHereOrAgent(c *cli.Context, e *env) (*oidc.Record, error) {
	cl, err := agentFor(c, e)
	if err != nil || cl == nil {
		if err != nil {
			return nil, err
		}
		return oidcToken(c, e)
	}
	resp, err := agentAuthorization(c.Context, cl, c, authz.SchemeOIDC)
	if err != nil {
		return nil, err
	}
	tok, ok := strings.CutPrefix(resp.Authorization, "Bearer ")
	if !ok {
		return nil, errdefs.Mark(errors.New("the agent's OpenID Connect header is not a bearer token"), errdefs.ErrUnreachable)
	}
	return &oidc.Record{Profile: settings.Of(c).String("profile"), AccessToken: tok, Expiry: resp.ExpiresAt}, nil
}

func oidcToken(c *cli.Context, e *env) (*oidc.Record, error) {
	s := settings.Of(c)
	tk, err := oidcTokens(s, e)
	if err != nil {
		return nil, err
	}
	rec, cached, err := tk.Token(c.Context, s.String("profile"))
	if err != nil {
		return nil, err
	}
	e.log.Debug().Object("tokens", rec).Bool("cached", cached).Msg("access token")
	return rec, nil
}

func statusCommand(e *env) *cli.Command {
	return &cli.Command{
		Description: examples("signagent status", "signagent status --json"),
		Name:        "status",
		Usage:       "show who the profile is signed in as, the scopes and space, and when the tokens expire (no token is shown)",
		Flags: concat([]cli.Flag{profileFlag(), tokenStoreFlag(),
			&cli.BoolFlag{Name: "all", Category: catOIDC, Usage: "every profile of the local token store, one line each (--json: a list)"},
			&cli.BoolFlag{Name: "json", Category: catOutput, Usage: "print it as JSON"}}, storeFlags()),
		Action: func(c *cli.Context) error {
			s := settings.Of(c)
			store, err := tokenStore(s)
			if err != nil {
				return err
			}
			if c.Bool("all") {
				return statusAll(c, e, store)
			}
			rec, err := store.Load(s.String("profile"))
			if errors.Is(err, oidc.ErrSignIn) && c.Bool("json") {
				// Signed out is an answer, not a failure, for a script
				// that asks: exit 0 with signedIn false and why.
				return writeJSON(e, map[string]any{"profile": s.String("profile"), "signedIn": false,
					"reason": err.Error()})
			}
			if err != nil {
				return err
			}
			return printStatus(e, rec, c.Bool("json"))
		},
	}
}

// jsonTime is the one time format of the JSON signagent prints: RFC 3339
// with milliseconds, in UTC.
func jsonTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func printStatus(e *env, r *oidc.Record, asJSON bool) error {
	now := time.Now()
	if asJSON {
		v := map[string]any{"profile": r.Profile, "signedIn": true, "subject": r.Subject, "email": r.Email, "name": r.Name,
			"space": r.Space(), "scopes": r.Scopes, "authUrl": r.AuthURL, "clientId": r.ClientID,
			"accessTokenExpiresAt": jsonTime(r.Expiry), "accessTokenValid": now.Before(r.Expiry),
			"refreshToken": r.RefreshToken != "", "signedInAt": jsonTime(r.SignedInAt)}
		if !r.RefreshedAt.IsZero() {
			v["refreshedAt"] = jsonTime(r.RefreshedAt)
		}
		return writeJSON(e, v)
	}
	left := "expired"
	if now.Before(r.Expiry) {
		left = "valid for " + r.Expiry.Sub(now).Round(time.Second).String()
	}
	refresh := "none (offline_access not granted): sign in again when the access token expires"
	if r.RefreshToken != "" {
		refresh = "held; it is refreshed when under --refresh-before is left"
	}
	fmt.Fprintf(e.stdout, "profile:       %s\nsigned in as:  %s\nname:          %s\nspace:         %s\nscopes:        %s\n"+
		"provider:      %s (client %s)\naccess token:  %s (expires %s)\nrefresh token: %s\nsigned in at:  %s\n",
		r.Profile, who(r), r.Name, r.Space(), strings.Join(r.Scopes, " "), r.AuthURL, r.ClientID, left,
		r.Expiry.Local().Format(time.DateTime), refresh, r.SignedInAt.Local().Format(time.DateTime))
	return nil
}

func logoutCommand(e *env) *cli.Command {
	return &cli.Command{
		Description: "The provider is asked to revoke the refresh token first (RFC 7009, when its discovery document\n" +
			"publishes a revocation endpoint), as oidc-agent does, so that a copy of it is worth nothing; when it cannot\n" +
			"be asked, nothing is removed and the command fails: --local-only removes the tokens here without asking.\n\n" +
			examples("signagent logout --profile robot", "signagent logout --local-only"),
		Name:  "logout",
		Usage: "revoke the profile's refresh token at the provider and remove its tokens from the token store",
		Flags: concat(oidcFlags(), []cli.Flag{profileFlag(),
			&cli.BoolFlag{Name: "local-only", Category: catOIDC, Usage: "remove the tokens here without asking the provider to revoke the refresh token"}}),
		Action: func(c *cli.Context) error { return logout(c, e) },
	}
}

func logout(c *cli.Context, e *env) error {
	s := settings.Of(c)
	store, err := tokenStore(s)
	if err != nil {
		return err
	}
	profile := s.String("profile")
	if err := oidc.CheckProfile(profile); err != nil {
		return err
	}
	revoked := ""
	if !c.Bool("local-only") {
		rec, err := store.Load(profile)
		switch {
		case errors.Is(err, oidc.ErrSignIn):
			// Nothing to revoke; removed below if a record is there at all.
		case err != nil:
			return fmt.Errorf("%w (signagent logout --local-only removes it without asking the provider)", err)
		default:
			sec, err := clientSecret(s)
			if err != nil {
				return err
			}
			client, err := refreshClient(s, e, rec, sec)
			if err != nil {
				return err
			}
			ok, err := client.Revoke(c.Context, rec)
			if err != nil {
				return fmt.Errorf("the refresh token of profile %s was not revoked and nothing was removed: %w (signagent logout --local-only removes the tokens here without asking)", profile, err)
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
		fmt.Fprintf(e.stdout, "Signed out: the tokens of profile %s are removed%s.\n", profile, revoked)
	} else {
		fmt.Fprintf(e.stdout, "Profile %s was not signed in.\n", profile)
	}
	return nil
}

// statusAll lists every profile of the local token store with its state,
// as gh auth status lists its hosts.
func statusAll(c *cli.Context, e *env, store oidc.Records) error {
	local, ok := store.(oidc.Store)
	if !ok {
		return usageErr(errors.New("--all lists the local token store's profiles; a shared store is asked one profile at a time (--profile)"))
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
			r.SignedIn, r.Subject, r.Space, r.ExpiresAt, r.Refresh = true, who(rec), rec.Space(), jsonTime(rec.Expiry), rec.RefreshToken != ""
		}
		rows = append(rows, r)
	}
	if c.Bool("json") {
		return writeJSON(e, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(e.stderr, "No profile is signed in (signagent login).")
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROFILE\tSIGNED IN AS\tSPACE\tACCESS TOKEN EXPIRES\tREFRESH TOKEN")
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
