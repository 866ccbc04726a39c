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
	return &cli.Command{
		Description: cmdutil.Examples("signagent trusted link --phone 9161234567 --service-user-id crm-42"),
		Name:        "link",
		Usage:       "link the service's user (found by phone) to a user of the trusted system (step 0)",
		UsageText:   "signagent trusted link --service-user-id ID --phone P [--trusted-url URL]",
		Flags:       cmdutil.Concat(cmdutil.ServiceFlags(), cmdutil.Pick(cmdutil.CredentialFlags(), "phone"), []cli.Flag{cmdutil.JSONFlag(`{"linked","serviceUserId","credential"}`)}),
		Action:      cmdutil.Run(f, readLink, runLink),
	}
}

// linkOptions are what link is told: the phone that finds the service's
// user and the trusted system's id for them.
type linkOptions struct {
	Phone         canonical.Credential
	ServiceUserID string
	JSON          bool
}

// readLink reads link's flags.
func readLink(c *cli.Context) (linkOptions, error) {
	if !c.IsSet("phone") {
		return linkOptions{}, cmdutil.UsageErr(errors.New("users are linked by phone: give --phone"))
	}
	phone, err := canonical.ParsePhone(c.String("phone"))
	return linkOptions{Phone: phone, ServiceUserID: c.String("service-user-id"), JSON: c.Bool("json")}, err
}

// runLink links the user, with the factory's trusted client (no token).
func runLink(ctx context.Context, f *factory.Factory, o linkOptions) error {
	client, err := f.Trusted(false)
	if err != nil {
		return err
	}
	if err := client.Link(ctx, o.ServiceUserID, o.Phone); err != nil {
		return err
	}
	f.Log.Info().Str("serviceUserId", o.ServiceUserID).Str("credential", o.Phone.Masked()).Msg("linked")
	if o.JSON {
		return cmdutil.WriteJSON(f.Env, map[string]any{"linked": true, "serviceUserId": o.ServiceUserID, "credential": o.Phone.Masked()})
	}
	_, err = fmt.Fprintf(f.Stdout, "linked %s to service user id %s\n", o.Phone.Masked(), o.ServiceUserID)
	return err
}

func sessionCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Description: cmdutil.SecretOutput("the auth.sid") + cmdutil.Examples("signagent trusted session --phone 9161234567 --service-user-id crm-42", "signagent trusted session --snils 11223344595 --service-user-id crm-42 --json"),
		Name:        "session",
		Usage:       "sign on the token and run authenticate-by-truster and approve-truster; print the auth.sid",
		UsageText:   "signagent trusted session --phone P | --snils S | --thumbprint T --service-user-id ID [--json]",
		Flags: cmdutil.Concat(cmdutil.Pick(cmdutil.CredentialFlags(), "phone", "snils", "thumbprint", "legacy-snils"), cmdutil.ServiceFlags(), cmdutil.TokenFlags(), factory.SignFlags(), cmdutil.StoreFlags(), []cli.Flag{
			&cli.DurationFlag{Name: "session-ttl", Category: cmdutil.CatStore, Value: 12 * time.Hour, EnvVars: []string{"SIGNAGENT_SESSION_TTL"}, Usage: "with --store: use a session the store holds when it is younger than `DURATION`, and keep a new one that long"},
			&cli.BoolFlag{Name: "json", Category: cmdutil.CatOutput, Usage: "print {\"sid\",\"kind\",\"obtainedAt\"}"},
		}, factory.AgentUseFlags()),
		Action: cmdutil.Run(f, readSession, runSession),
	}
}

// sessionOptions are what session is told: the user (a credential and
// the trusted system's id), how long a session the store holds serves,
// and what the command needs when it does the work here.
type sessionOptions struct {
	Cred          canonical.Credential
	ServiceUserID string
	TTL           time.Duration
	JSON          bool
	// Needs are the settings a session here needs (the API key, the
	// service's address), said at once when missing; the agent needs
	// none of them.
	Needs []cmdutil.Need
}

// readSession reads session's flags.
func readSession(c *cli.Context) (sessionOptions, error) {
	cred, err := cmdutil.Credential(c)
	return sessionOptions{Cred: cred, ServiceUserID: c.String("service-user-id"), TTL: c.Duration("session-ttl"), JSON: c.Bool("json"),
		Needs: []cmdutil.Need{cmdutil.APIKeySpec.Need(settings.Of(c)), cmdutil.FlagNeed(c, "trusted-url")}}, err
}

// runSession obtains the auth.sid: from the running agent when one is
// asked, else through the shared store when there is one (its session,
// or one made now under its lease), else by a login on the token here.
func runSession(ctx context.Context, f *factory.Factory, o sessionOptions) error {
	if cl, err := f.Agent(); err != nil || cl != nil {
		if err != nil {
			return err
		}
		// The agent's session for the user: its cache, its token.
		resp, err := cl.Session(ctx, agentapi.SessionRequest{Credential: *cmdutil.APICredential(o.Cred), ServiceUserID: o.ServiceUserID})
		if err != nil {
			return factory.AgentCallError(err)
		}
		return printSession(f.Env, o.JSON, &trusted.Session{Sid: resp.Sid, Kind: o.Cred.Kind, ObtainedAt: resp.ObtainedAt.Time})
	}
	if err := cmdutil.Missing(o.Needs...); err != nil {
		return err
	}
	key, err := cmdutil.APIKeyFrom(f.Settings())
	if err != nil {
		return err
	}
	// The selection is checked now; its PIN is read only when a login
	// runs.
	if _, err := cmdutil.SelectionFrom(f.Settings(), true); err != nil {
		return err
	}
	// The token is opened only when a login must run: a session the
	// shared store holds costs no PIN and no signature.
	flow := func(ctx context.Context) (*trusted.Session, error) {
		client, err := f.Trusted(true)
		if err != nil {
			return nil, err
		}
		return client.Session(ctx, o.Cred, o.ServiceUserID)
	}
	r, err := f.Store()
	if err != nil {
		return err
	}
	var s *trusted.Session
	if r != nil {
		sid, at, fromStore, err := trusted.SharedSession(ctx, r, key, o.Cred, o.ServiceUserID, o.TTL, flow)
		if errors.Is(err, store.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", oidc.ErrStoreUnavailable, err)
		}
		if err != nil {
			return err
		}
		f.Log.Info().Bool("fromStore", fromStore).Msg("session through the shared store")
		s = &trusted.Session{Sid: sid, Kind: o.Cred.Kind, ObtainedAt: at}
	} else if s, err = flow(ctx); err != nil {
		return err
	}
	f.Log.Info().Str("credential", o.Cred.Masked()).Str("sid", secret.Mask(s.Sid)).Msg("session obtained")
	return printSession(f.Env, o.JSON, s)
}

// printSession prints the auth.sid, or with --json the session.
func printSession(e *cmdutil.Env, asJSON bool, s *trusted.Session) error {
	if asJSON {
		return cmdutil.WriteJSON(e, map[string]string{"sid": s.Sid, "kind": s.Kind.String(), "obtainedAt": cmdutil.JSONTime(s.ObtainedAt)})
	}
	_, err := fmt.Fprintln(e.Stdout, s.Sid)
	return err
}
