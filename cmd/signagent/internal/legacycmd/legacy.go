package legacycmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/legacy"
)

// legacyLoginFlags choose how to authenticate.
func legacyLoginFlags() []cli.Flag {
	return []cli.Flag{
		cmdutil.OneOf(&cli.StringFlag{Name: "by", Category: cmdutil.CatLegacy, Usage: "authenticate by `WAY`: password, certificate (the token's key decrypts a challenge) or sid"},
			"password", "certificate", "sid"),
		&cli.StringFlag{Name: "login", Category: cmdutil.CatLegacy, EnvVars: []string{"SIGNAGENT_LOGIN"}, Usage: "the user's `LOGIN` (--by password)"},
		cmdutil.PasswordSpec.FlagWith(cmdutil.CatLegacy, ", else a prompt on a terminal"),
		cmdutil.SIDSpec.FlagWith(cmdutil.CatLegacy, ", else run trusted authentication with the credential flags"),
	}
}

func legacyCommandFlags(extra ...cli.Flag) []cli.Flag {
	return cmdutil.Concat(legacyLoginFlags(), cmdutil.Pick(factory.ServeFlags(), "business-url", "developer-key-file", "legacy-token-ttl", "legacy-challenge-size"), cmdutil.Pick(cmdutil.CredentialFlags(), "phone", "snils", "thumbprint", "legacy-snils"), factory.ServiceFlags(), cmdutil.TokenFlags(), factory.SignFlags(), extra)
}

func legacyTokenCommand(f *factory.Factory) *cli.Command {
	e := f.Env
	return &cli.Command{
		Description: cmdutil.SecretOutput("the legacy token") + cmdutil.Examples("signagent legacy token --by password --login alice --password-file pw", "signagent legacy token --by certificate", "signagent legacy token --by sid --sid-file sid"),
		Name:        "token",
		Usage:       "obtain a legacy authorization token (Authenticate V3) by password, certificate or auth.sid; print it",
		UsageText: "signagent legacy token --by password --login L\n" +
			"signagent legacy token --by certificate [token flags]\n" +
			"signagent legacy token --by sid [--sid-file F | --snils S --service-user-id ID]",
		Flags: cmdutil.Concat(legacyCommandFlags(&cli.BoolFlag{Name: "json", Category: cmdutil.CatOutput, Usage: "print {\"token\",\"by\",\"obtainedAt\",\"expiresAt\"} (through the agent, no obtainedAt)"}), factory.StoreFlags(), factory.AgentUseFlags()),
		Action: func(c *cli.Context) error {
			if cl, err := f.Agent(); err != nil || cl != nil {
				if err != nil {
					return err
				}
				return legacyTokenFromAgent(c, f, cl)
			}
			tok, _, err := obtainLegacy(c, f)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return cmdutil.WriteJSON(e, map[string]string{"token": tok.Value, "by": string(tok.By),
					"obtainedAt": cmdutil.JSONTime(tok.ObtainedAt), "expiresAt": cmdutil.JSONTime(tok.ExpiresAt)})
			}
			_, err = fmt.Fprintln(e.Stdout, tok.Value)
			return err
		},
	}
}

// legacyTokenFromAgent is the token of the agent's header for the
// identity the flags name.
func legacyTokenFromAgent(c *cli.Context, f *factory.Factory, cl *agentclient.Client) error {
	e := f.Env
	resp, err := f.AgentAuthorization(c.Context, cl, authz.SchemeLegacy)
	if err != nil {
		return err
	}
	_, tok, ok := strings.Cut(resp.Authorization, ",ddauth_token=")
	if !ok || !strings.HasPrefix(resp.Authorization, legacy.HeaderScheme+" ") {
		return errdefs.Mark(errors.New("the agent's legacy header has no ddauth_token"), errdefs.ErrUnreachable)
	}
	if c.Bool("json") {
		return cmdutil.WriteJSON(e, map[string]string{"token": tok, "by": c.String("by"), "expiresAt": cmdutil.JSONTime(resp.ExpiresAt.Time)})
	}
	_, err = fmt.Fprintln(e.Stdout, tok)
	return err
}

func headerCommand(f *factory.Factory) *cli.Command {
	e := f.Env
	return &cli.Command{
		Description: cmdutil.SecretOutput("the Authorization header, a bearer token or a legacy token") +
			cmdutil.Examples("signagent header", "signagent header --scheme legacy --by certificate --json", "curl -H \"Authorization: $(signagent header)\" URL"),
		Name:  "header",
		Usage: "print the Authorization header value of a business call",
		UsageText: "signagent header --scheme legacy --by password|certificate|sid [...]\n" +
			"signagent header --scheme oidc [--profile NAME]",
		Flags: cmdutil.Concat(legacyCommandFlags(schemeFlag("the authorization "+schemeUsage(false), schemeNames(false)...)),
			factory.OIDCFlags(), []cli.Flag{factory.ProfileFlag(), cmdutil.JSONFlag(`{"authorization","expiresAt"}`)}, factory.AgentUseFlags()),
		Action: func(c *cli.Context) error {
			emit := func(header string, expires time.Time) error {
				if c.Bool("json") {
					return cmdutil.WriteJSON(e, map[string]any{"authorization": header, "expiresAt": cmdutil.JSONTime(expires)})
				}
				_, err := fmt.Fprintln(e.Stdout, header)
				return err
			}
			if err := checkScheme(c); err != nil {
				return err
			}
			cl, err := f.Agent()
			if err != nil {
				return err
			}
			if cl != nil {
				resp, err := f.AgentAuthorization(c.Context, cl, c.String("scheme"))
				if err != nil {
					return err
				}
				return emit(resp.Authorization, resp.ExpiresAt.Time)
			}
			// Here, from the schemes of the list as api builds them.
			s := settings.Of(c)
			if err := cmdutil.Missing(headerNeeds(c, s)...); err != nil {
				return err
			}
			a, err := apiAuthorizer(c, f)
			if err != nil {
				return orOtherScheme(c, err)
			}
			h, err := a.Header(c.Context)
			if err != nil {
				return orOtherScheme(c, err)
			}
			e.Log.Info().Str("scheme", c.String("scheme")).Str("identity", a.Identity()).Str("from", h.Source).
				Time("expiresAt", h.ExpiresAt).Msg("authorization header obtained")
			return emit(h.Value, h.ExpiresAt)
		},
	}
}

// schemeFlag is --scheme of header and api: one default for both,
// OpenID Connect, the service's recommendation; the values checked before
// the command runs, a mistyped one named (cmdutil.OneOf).
func schemeFlag(usage string, values ...string) cli.Flag {
	return cmdutil.OneOf(&cli.StringFlag{Name: "scheme", Category: cmdutil.CatOutput, Value: authz.SchemeOIDC, Usage: usage}, values...)
}

// checkScheme refuses the legacy scheme's flags without --scheme legacy:
// with the default scheme they would be ignored without a word.
func checkScheme(c *cli.Context) error {
	if c.IsSet("by") && !c.IsSet("scheme") {
		return cmdutil.UsageErr(fmt.Errorf("--by %s is a way into the legacy scheme: add --scheme legacy (the default --scheme is oidc)", c.String("by")))
	}
	return nil
}

// orOtherScheme adds to a sign-in error of the default scheme that
// --scheme chooses another.
func orOtherScheme(c *cli.Context, err error) error {
	if c.IsSet("scheme") || !errors.Is(err, errdefs.ErrSignIn) {
		return err
	}
	return fmt.Errorf("%w (--scheme oidc is the default; --scheme legacy --by password|certificate|sid for the legacy scheme)", err)
}

// obtainLegacy checks the flags, builds the identity (opening the token
// when the way in needs it) and authenticates.
func obtainLegacy(c *cli.Context, f *factory.Factory) (legacy.Token, *legacy.Client, error) {
	s, e := f.Settings(), f.Env
	if !c.IsSet("by") {
		return legacy.Token{}, nil, cmdutil.UsageErr(errors.New("give --by password, --by certificate or --by sid"))
	}
	by, err := legacy.ParseMethod(c.String("by"))
	if err != nil {
		return legacy.Token{}, nil, err
	}
	if err := cmdutil.Missing(cmdutil.FlagNeed(c, "business-url"), cmdutil.DeveloperKeySpec.Need(s)); err != nil {
		return legacy.Token{}, nil, err
	}
	client, err := f.Legacy()
	if err != nil {
		return legacy.Token{}, nil, err
	}
	id, err := legacyIdentity(c, f, by)
	if err != nil {
		return legacy.Token{}, nil, err
	}
	var tok legacy.Token
	r, err := f.Store()
	if err != nil {
		return legacy.Token{}, nil, err
	}
	if r != nil {
		// Through the shared store: the token the agents (or an earlier
		// command) obtained for this identity, or one obtained now under
		// its lease and kept there.
		tokens := legacy.NewTokens(client, 0, 0)
		tokens.Share(r)
		tok, _, err = tokens.Token(c.Context, id)
	} else {
		tok, err = client.Authenticate(c.Context, id)
	}
	if err != nil {
		return legacy.Token{}, nil, err
	}
	e.Log.Info().Str("by", string(by)).Str("subject", id.Subject).Str("token", secret.Mask(tok.Value)).
		Time("expiresAt", tok.ExpiresAt).Msg("legacy token obtained")
	return tok, client, nil
}

// legacyIdentity builds who logs in (opening the token when it must).
func legacyIdentity(c *cli.Context, f *factory.Factory, by legacy.Method) (legacy.Identity, error) {
	sel, err := legacySelector(c, by)
	if err != nil {
		return legacy.Identity{}, err
	}
	return legacyScheme(f, nil).Identity(sel)
}

// legacySelector is the legacy identity the flags name.
func legacySelector(c *cli.Context, by legacy.Method) (authz.Selector, error) {
	sel := authz.Selector{Scheme: authz.SchemeLegacy, By: string(by)}
	if by == legacy.ByPassword {
		if sel.Login = strings.TrimSpace(c.String("login")); sel.Login == "" {
			return sel, cmdutil.UsageErr(errors.New("--by password needs --login (or SIGNAGENT_LOGIN)"))
		}
	}
	return sel, nil
}

// legacyScheme is the legacy scheme as the flags configure it: a password
// from its sources (a prompt last), the token's certificate (opened when
// asked), an auth.sid from its sources or trusted authentication with the
// Credential flags.
func legacyScheme(f *factory.Factory, tokens *legacy.Tokens) *legacy.Scheme {
	s, e := f.Settings(), f.Env
	return &legacy.Scheme{
		Tokens:      tokens,
		Password:    func(login string) (string, error) { return readPassword(s, e, login) },
		Certificate: f.Certificate,
		SidIdentity: func(authz.Selector) (legacy.Identity, error) { return sidIdentity(f) },
	}
}

// sidIdentity reads the auth.sid from --sid-file or $SIGNAGENT_SID, or runs
// Trusted authentication on the token for the credential flags.
func sidIdentity(f *factory.Factory) (legacy.Identity, error) {
	s := f.Settings()
	c := s.Context()
	src := cmdutil.SIDSpec.Source(s)
	if src.Given() {
		got, err := src.Resolve()
		if err != nil {
			return legacy.Identity{}, errdefs.Mark(err, errdefs.ErrInvalidInput)
		}
		return staticSid(got.From, got.Value), nil
	}
	cred, err := cmdutil.Credential(c)
	if err != nil {
		return legacy.Identity{}, cmdutil.UsageErr(fmt.Errorf("--by sid needs --sid-file, SIGNAGENT_SID, or a trusted credential (--phone, --snils or --thumbprint) with --service-user-id: %w", err))
	}
	if _, err := cmdutil.SelectionFrom(s, true); err != nil {
		return legacy.Identity{}, err
	}
	client, err := f.Trusted(true)
	if err != nil {
		return legacy.Identity{}, err
	}
	userID := c.String("service-user-id")
	return legacy.Identity{By: legacy.BySid, Subject: "trusted " + cred.Masked() + " serviceUserId=" + userID,
		Sid: func(ctx context.Context) (string, error) {
			sess, err := client.Session(ctx, cred, userID)
			if err != nil {
				return "", err
			}
			return sess.Sid, nil
		}}, nil
}

func staticSid(from, sid string) legacy.Identity {
	return legacy.GivenSid("the auth.sid from "+from, strings.TrimSpace(sid))
}

// readPassword reads the password (see secretSpec for the order of its
// sources, a prompt on the terminal last); never argv.
func readPassword(s *settings.Settings, e *cmdutil.Env, login string) (string, error) {
	src := cmdutil.PasswordSpec.Source(s)
	if tty, ok := e.Stdin.(*os.File); ok {
		src.TTY, src.Out, src.Prompt = tty, e.Stderr, "Password for "+login+": "
	}
	got, err := src.Resolve()
	if err != nil {
		return "", errdefs.Mark(err, errdefs.ErrInvalidInput)
	}
	return got.Value, nil
}
