package trustedcmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

func linkCommand(f *factory.Factory) *cli.Command {
	e := f.Env
	return &cli.Command{
		Description: cmdutil.Examples("signagent link --phone 9161234567 --service-user-id crm-42"),
		Name:        "link",
		Usage:       "link the service's user (found by phone) to a user of the trusted system (step 0)",
		UsageText:   "signagent link --service-user-id ID --phone P [--base-url URL]",
		Flags:       cmdutil.Concat(factory.ServiceFlags(), cmdutil.Pick(cmdutil.CredentialFlags(), "phone"), []cli.Flag{cmdutil.JSONFlag(`{"linked","serviceUserId","credential"}`)}),
		Action: func(c *cli.Context) error {
			if !c.IsSet("phone") {
				return cmdutil.UsageErr(errors.New("users are linked by phone: give --phone"))
			}
			phone, err := canonical.ParsePhone(c.String("phone"))
			if err != nil {
				return err
			}
			client, err := f.Trusted(false)
			if err != nil {
				return err
			}
			id := c.String("service-user-id")
			if err := client.Link(c.Context, id, phone); err != nil {
				return err
			}
			e.Log.Info().Str("serviceUserId", id).Str("credential", phone.Masked()).Msg("linked")
			if c.Bool("json") {
				return cmdutil.WriteJSON(e, map[string]any{"linked": true, "serviceUserId": id, "credential": phone.Masked()})
			}
			fmt.Fprintf(e.Stdout, "linked %s to service user id %s\n", phone.Masked(), id)
			return nil
		},
	}
}

func sessionCommand(f *factory.Factory) *cli.Command {
	e := f.Env
	return &cli.Command{
		Description: cmdutil.SecretOutput("the auth.sid") + cmdutil.Examples("signagent session --phone 9161234567 --service-user-id crm-42", "signagent session --snils 11223344595 --service-user-id crm-42 --json"),
		Name:        "session",
		Usage:       "sign on the token and run authenticate-by-truster and approve-truster; print the auth.sid",
		UsageText:   "signagent session --phone P | --snils S | --thumbprint T --service-user-id ID [--json]",
		Flags: cmdutil.Concat(cmdutil.Pick(cmdutil.CredentialFlags(), "phone", "snils", "thumbprint", "legacy-snils"), factory.ServiceFlags(), cmdutil.TokenFlags(), factory.SignFlags(), factory.StoreFlags(), []cli.Flag{
			&cli.DurationFlag{Name: "session-ttl", Category: cmdutil.CatStore, Value: 12 * time.Hour, EnvVars: []string{"SIGNAGENT_SESSION_TTL"}, Usage: "with --store: use a session the store holds when it is younger than `DURATION`, and keep a new one that long"},
			&cli.BoolFlag{Name: "json", Category: cmdutil.CatOutput, Usage: "print {\"sid\",\"kind\",\"obtainedAt\"}"},
		}, factory.AgentUseFlags()),
		Action: func(c *cli.Context) error {
			cred, err := cmdutil.Credential(c)
			if err != nil {
				return err
			}
			if cl, err := f.Agent(); err != nil || cl != nil {
				if err != nil {
					return err
				}
				// The agent's session for the user: its cache, its token.
				resp, err := cl.Session(c.Context, agentapi.SessionRequest{Credential: *cmdutil.APICredential(cred), ServiceUserID: c.String("service-user-id")})
				if err != nil {
					return factory.AgentCallError(err)
				}
				return printSession(c, e, &trusted.Session{Sid: resp.Sid, Kind: cred.Kind, ObtainedAt: resp.ObtainedAt})
			}
			if err := cmdutil.Missing(cmdutil.APIKeySpec.Need(settings.Of(c)), cmdutil.FlagNeed(c, "base-url")); err != nil {
				return err
			}
			key, err := cmdutil.APIKey(c)
			if err != nil {
				return err
			}
			userID := c.String("service-user-id")
			if _, err := cmdutil.Selection(c); err != nil {
				return err
			}
			// The token is opened only when a login must run: a session the
			// shared store holds costs no PIN and no signature.
			flow := func(ctx context.Context) (*trusted.Session, error) {
				client, err := f.Trusted(true)
				if err != nil {
					return nil, err
				}
				return client.Session(ctx, cred, userID)
			}
			r, err := f.Store()
			if err != nil {
				return err
			}
			var s *trusted.Session
			if r != nil {
				sid, at, fromStore, err := trusted.SharedSession(c.Context, r, key, cred, userID, c.Duration("session-ttl"), flow)
				if errors.Is(err, store.ErrUnavailable) {
					err = fmt.Errorf("%w: %w", oidc.ErrStoreUnavailable, err)
				}
				if err != nil {
					return err
				}
				e.Log.Info().Bool("fromStore", fromStore).Msg("session through the shared store")
				s = &trusted.Session{Sid: sid, Kind: cred.Kind, ObtainedAt: at}
			} else if s, err = flow(c.Context); err != nil {
				return err
			}
			e.Log.Info().Str("credential", cred.Masked()).Str("sid", secret.Mask(s.Sid)).Msg("session obtained")
			return printSession(c, e, s)
		},
	}
}

// printSession prints the auth.sid, or with --json the session.
func printSession(c *cli.Context, e *cmdutil.Env, s *trusted.Session) error {
	if c.Bool("json") {
		return cmdutil.WriteJSON(e, map[string]string{"sid": s.Sid, "kind": s.Kind.String(), "obtainedAt": s.ObtainedAt.Format(time.RFC3339)})
	}
	_, err := fmt.Fprintln(e.Stdout, s.Sid)
	return err
}
