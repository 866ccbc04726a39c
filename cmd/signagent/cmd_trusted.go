package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/api"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/internal/settings"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/trusted"
)

func serviceFlags() []cli.Flag {
	return append(apiKeyFlags(),
		&cli.StringFlag{Name: "base-url", Category: catService, EnvVars: []string{"SIGNAGENT_BASE_URL"}, Usage: "the service's auth base `URL` (endpoints are below URL/auth/v5.16/)"},
		&cli.BoolFlag{Name: "insecure-http", Category: catService, EnvVars: []string{"SIGNAGENT_INSECURE_HTTP"}, Usage: "allow plain http to a non-loopback base URL"},
		&cli.DurationFlag{Name: "request-timeout", Category: catService, Value: 15 * time.Second, EnvVars: []string{"SIGNAGENT_REQUEST_TIMEOUT"}, Usage: "give up on one request after `DURATION`"},
		&cli.IntFlag{Name: "attempts", Category: catService, Value: 3, EnvVars: []string{"SIGNAGENT_ATTEMPTS"}, Usage: "`N` tries of a request that failed in transport or with 5xx"},
		&cli.StringFlag{Name: "service-user-id", Category: catService, Usage: "the user's `ID` in the trusted (partner) system"},
	)
}

func linkCommand(e *env) *cli.Command {
	return &cli.Command{
		Description: examples("signagent link --phone 9161234567 --service-user-id crm-42"),
		Name:        "link",
		Usage:       "link the service's user (found by phone) to a user of the trusted system (step 0)",
		UsageText:   "signagent link --service-user-id ID --phone P [--base-url URL]",
		Flags:       concat(serviceFlags(), pick(credentialFlags(), "phone"), []cli.Flag{jsonFlag(`{"linked","serviceUserId","credential"}`)}),
		Action: func(c *cli.Context) error {
			if !c.IsSet("phone") {
				return usageErr(errors.New("users are linked by phone: give --phone"))
			}
			phone, err := canonical.ParsePhone(c.String("phone"))
			if err != nil {
				return err
			}
			client, err := newFactory(c, e).trusted(false)
			if err != nil {
				return err
			}
			id := c.String("service-user-id")
			if err := client.Link(c.Context, id, phone); err != nil {
				return err
			}
			e.log.Info().Str("serviceUserId", id).Str("credential", phone.Masked()).Msg("linked")
			if c.Bool("json") {
				return writeJSON(e, map[string]any{"linked": true, "serviceUserId": id, "credential": phone.Masked()})
			}
			fmt.Fprintf(e.stdout, "linked %s to service user id %s\n", phone.Masked(), id)
			return nil
		},
	}
}

func sessionCommand(e *env) *cli.Command {
	return &cli.Command{
		Description: examples("signagent session --phone 9161234567 --service-user-id crm-42", "signagent session --snils 11223344595 --service-user-id crm-42 --json"),
		Name:        "session",
		Usage:       "sign on the token and run authenticate-by-truster and approve-truster; print the auth.sid",
		UsageText:   "signagent session --phone P | --snils S | --thumbprint T --service-user-id ID [--json]",
		Flags: concat(pick(credentialFlags(), "phone", "snils", "thumbprint", "legacy-snils"), serviceFlags(), tokenFlags(), signFlags(), storeFlags(), []cli.Flag{
			&cli.DurationFlag{Name: "session-ttl", Category: catStore, Value: 12 * time.Hour, EnvVars: []string{"SIGNAGENT_SESSION_TTL"}, Usage: "with --store: use a session the store holds when it is younger than `DURATION`, and keep a new one that long"},
			&cli.BoolFlag{Name: "json", Category: catOutput, Usage: "print {\"sid\",\"kind\",\"obtainedAt\"}"},
		}, agentUseFlags()),
		Action: func(c *cli.Context) error {
			cred, err := credential(c)
			if err != nil {
				return err
			}
			if cl, err := agentFor(c, e); err != nil || cl != nil {
				if err != nil {
					return err
				}
				// The agent's session for the user: its cache, its token.
				resp, err := cl.Session(c.Context, api.SessionRequest{Credential: *apiCredential(cred), ServiceUserID: c.String("service-user-id")})
				if err != nil {
					return agentError(err)
				}
				return printSession(c, e, &trusted.Session{Sid: resp.Sid, Kind: cred.Kind, ObtainedAt: resp.ObtainedAt})
			}
			if err := missing(apiKeySecret.need(settings.Of(c)), flagNeed(c, "base-url")); err != nil {
				return err
			}
			key, err := apiKey(c)
			if err != nil {
				return err
			}
			userID := c.String("service-user-id")
			if _, err := selection(c); err != nil {
				return err
			}
			// The token is opened only when a login must run: a session the
			// shared store holds costs no PIN and no signature.
			f := newFactory(c, e)
			defer f.close()
			flow := func(ctx context.Context) (*trusted.Session, error) {
				client, err := f.trusted(true)
				if err != nil {
					return nil, err
				}
				return client.Session(ctx, cred, userID)
			}
			r, err := openStore(settings.Of(c))
			if err != nil {
				return err
			}
			var s *trusted.Session
			if r != nil {
				defer r.Close()
				sid, at, fromStore, err := trusted.SharedSession(c.Context, r, key, cred, userID, c.Duration("session-ttl"), flow)
				if errors.Is(err, store.ErrUnavailable) {
					err = fmt.Errorf("%w: %w", oidc.ErrStoreUnavailable, err)
				}
				if err != nil {
					return err
				}
				e.log.Info().Bool("fromStore", fromStore).Msg("session through the shared store")
				s = &trusted.Session{Sid: sid, Kind: cred.Kind, ObtainedAt: at}
			} else if s, err = flow(c.Context); err != nil {
				return err
			}
			e.log.Info().Str("credential", cred.Masked()).Str("sid", secret.Mask(s.Sid)).Msg("session obtained")
			return printSession(c, e, s)
		},
	}
}

// printSession prints the auth.sid, or with --json the session.
func printSession(c *cli.Context, e *env, s *trusted.Session) error {
	if c.Bool("json") {
		return writeJSON(e, map[string]string{"sid": s.Sid, "kind": s.Kind.String(), "obtainedAt": s.ObtainedAt.Format(time.RFC3339)})
	}
	_, err := fmt.Fprintln(e.stdout, s.Sid)
	return err
}
