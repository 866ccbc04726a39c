package main

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
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/internal/settings"
	"github.com/signagent/signagent/legacy"
)

const catLegacy = "Legacy scheme"

// legacyServiceFlags say where the business API is and which developer
// key calls it; the agent takes them too.
func legacyServiceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "api-url", Category: catLegacy, EnvVars: []string{"SIGNAGENT_API_URL"}, Usage: "the service's business API `URL` (Authenticate is at URL/V3/Authenticate)"},
		developerKeySecret.flagWith(catLegacy, ""),
		&cli.DurationFlag{Name: "legacy-token-ttl", Category: catLegacy, Value: legacy.DefaultTokenTTL, EnvVars: []string{"SIGNAGENT_LEGACY_TOKEN_TTL"}, Usage: "`DURATION` a legacy token lives (the service's 24h); caches reuse it until a margin before"},
	}
}

// legacyLoginFlags choose how to authenticate.
func legacyLoginFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "by", Category: catLegacy, Usage: "authenticate by `WAY`: password, certificate (the token's key decrypts a challenge) or sid"},
		&cli.StringFlag{Name: "login", Category: catLegacy, EnvVars: []string{"SIGNAGENT_LOGIN"}, Usage: "the user's `LOGIN` (--by password)"},
		passwordSecret.flagWith(catLegacy, ", else a prompt on a terminal"),
		sidSecret.flagWith(catLegacy, ", else run trusted authentication with the credential flags"),
	}
}

func legacyCommandFlags(extra ...cli.Flag) []cli.Flag {
	return concat(legacyLoginFlags(), legacyServiceFlags(), pick(credentialFlags(), "phone", "snils", "thumbprint", "legacy-snils"), serviceFlags(), tokenFlags(), signFlags(), extra)
}

func legacyTokenCommand(e *env) *cli.Command {
	return &cli.Command{
		Description: examples("signagent legacy-token --by password --login alice --password-file pw", "signagent legacy-token --by certificate", "signagent legacy-token --by sid --sid-file sid"),
		Name:        "legacy-token",
		Usage:       "obtain a legacy authorization token (Authenticate V3) by password, certificate or auth.sid; print it",
		UsageText: "signagent legacy-token --by password --login L\n" +
			"signagent legacy-token --by certificate [token flags]\n" +
			"signagent legacy-token --by sid [--sid-file F | --snils S --service-user-id ID]",
		Flags: concat(legacyCommandFlags(&cli.BoolFlag{Name: "json", Category: catOutput, Usage: "print {\"token\",\"by\",\"obtainedAt\",\"expiresAt\"} (through the agent, no obtainedAt)"}), storeFlags(), agentUseFlags()),
		Action: func(c *cli.Context) error {
			if cl, err := agentFor(c, e); err != nil || cl != nil {
				if err != nil {
					return err
				}
				return legacyTokenFromAgent(c, e, cl)
			}
			tok, _, err := obtainLegacy(c, e)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(e, map[string]string{"token": tok.Value, "by": string(tok.By),
					"obtainedAt": tok.ObtainedAt.Format(time.RFC3339), "expiresAt": tok.ExpiresAt.Format(time.RFC3339)})
			}
			_, err = fmt.Fprintln(e.stdout, tok.Value)
			return err
		},
	}
}

// legacyTokenFromAgent is the token of the agent's header for the
// identity the flags name.
func legacyTokenFromAgent(c *cli.Context, e *env, cl *agentclient.Client) error {
	resp, err := agentAuthorization(c.Context, cl, c, authz.SchemeLegacy)
	if err != nil {
		return err
	}
	_, tok, ok := strings.Cut(resp.Authorization, ",ddauth_token=")
	if !ok || !strings.HasPrefix(resp.Authorization, legacy.HeaderScheme+" ") {
		return errdefs.Mark(errors.New("the agent's legacy header has no ddauth_token"), errdefs.ErrUnreachable)
	}
	if c.Bool("json") {
		return writeJSON(e, map[string]string{"token": tok, "by": c.String("by"), "expiresAt": resp.ExpiresAt.Format(time.RFC3339)})
	}
	_, err = fmt.Fprintln(e.stdout, tok)
	return err
}

func headerCommand(e *env) *cli.Command {
	return &cli.Command{
		Description: examples("signagent header --scheme oidc", "signagent header --scheme legacy --by certificate --json"),
		Name:        "header",
		Usage:       "print the Authorization header value of a business call",
		UsageText: "signagent header --scheme legacy --by password|certificate|sid [...]\n" +
			"signagent header --scheme oidc [--profile NAME]",
		Flags: concat(legacyCommandFlags(&cli.StringFlag{Name: "scheme", Category: catOutput, Value: "legacy",
			Usage: "the authorization `SCHEME`: legacy (ServiceAuth ddauth_api_client_id=...,ddauth_token=...) or oidc (Bearer <access token>)"}),
			oidcHeaderFlags(), []cli.Flag{jsonFlag(`{"authorization","expiresAt"}`)}, agentUseFlags()),
		Action: func(c *cli.Context) error {
			emit := func(header string, expires time.Time) error {
				if c.Bool("json") {
					return writeJSON(e, map[string]any{"authorization": header, "expiresAt": jsonTime(expires)})
				}
				_, err := fmt.Fprintln(e.stdout, header)
				return err
			}
			if s := c.String("scheme"); s != "oidc" && s != "legacy" {
				return usageErr(fmt.Errorf("--scheme %q: want legacy or oidc", s))
			}
			cl, err := agentFor(c, e)
			if err != nil {
				return err
			}
			if cl != nil {
				resp, err := agentAuthorization(c.Context, cl, c, c.String("scheme"))
				if err != nil {
					return err
				}
				return emit(resp.Authorization, resp.ExpiresAt)
			}
			switch c.String("scheme") {
			case "oidc":
				rec, err := oidcToken(c, e)
				if err != nil {
					return err
				}
				return emit(rec.Header(), rec.Expiry)
			}
			tok, client, err := obtainLegacy(c, e)
			if err != nil {
				return err
			}
			return emit(client.Header(tok.Value), tok.ExpiresAt)
		},
	}
}

// obtainLegacy checks the flags, builds the identity (opening the token
// when the way in needs it) and authenticates.
func obtainLegacy(c *cli.Context, e *env) (legacy.Token, *legacy.Client, error) {
	s := settings.Of(c)
	if !c.IsSet("by") {
		return legacy.Token{}, nil, usageErr(errors.New("give --by password, --by certificate or --by sid"))
	}
	by, err := legacy.ParseMethod(c.String("by"))
	if err != nil {
		return legacy.Token{}, nil, err
	}
	if err := missing(flagNeed(c, "api-url"), developerKeySecret.need(s)); err != nil {
		return legacy.Token{}, nil, err
	}
	client, err := legacyClient(s, e)
	if err != nil {
		return legacy.Token{}, nil, err
	}
	id, done, err := legacyIdentity(c, e, by)
	if err != nil {
		return legacy.Token{}, nil, err
	}
	defer done()
	var tok legacy.Token
	r, err := openStore(s)
	if err != nil {
		return legacy.Token{}, nil, err
	}
	if r != nil {
		// Through the shared store: the token the agents (or an earlier
		// command) obtained for this identity, or one obtained now under
		// its lease and kept there.
		defer r.Close()
		tokens := legacy.NewTokens(client, 0, 0)
		tokens.Share(r)
		tok, _, err = tokens.Token(c.Context, id)
	} else {
		tok, err = client.Authenticate(c.Context, id)
	}
	if err != nil {
		return legacy.Token{}, nil, err
	}
	e.log.Info().Str("by", string(by)).Str("subject", id.Subject).Str("token", secret.Mask(tok.Value)).
		Time("expiresAt", tok.ExpiresAt).Msg("legacy token obtained")
	return tok, client, nil
}

// legacyClient builds the client from --api-url and the developer key.
func legacyClient(s *settings.Settings, e *env) (*legacy.Client, error) {
	cfg, err := legacyConfig(s, e)
	if err != nil {
		return nil, err
	}
	return legacy.New(*cfg)
}

func legacyConfig(s *settings.Settings, e *env) (*legacy.Config, error) {
	key, err := developerKey(s)
	if err != nil {
		return nil, err
	}
	if s.String("api-url") == "" {
		return nil, usageErr(errors.New("give the service's business API address with --api-url or SIGNAGENT_API_URL"))
	}
	if _, err := legacy.ParseAPIURL(s.String("api-url"), s.Bool("insecure-http")); err != nil {
		return nil, err
	}
	cfg := &legacy.Config{APIURL: s.String("api-url"), AllowInsecureHTTP: s.Bool("insecure-http"), DeveloperKey: key,
		TokenTTL: s.Duration("legacy-token-ttl"), Timeout: s.Duration("request-timeout"), Attempts: s.Int("attempts"),
		UserAgent: "signagent/" + Version, Log: e.log}
	return cfg, s.Err()
}

// legacyAgentConfig is the agent's legacy scheme: the client's
// configuration and the passwords of --legacy-password-file LOGIN=FILE.
func legacyAgentConfig(s *settings.Settings, e *env) (*legacy.Config, map[string]string, error) {
	cfg, err := legacyConfig(s, e)
	if err != nil {
		return nil, nil, err
	}
	pws := map[string]string{}
	for _, spec := range s.Strings("legacy-password-file") {
		login, file, ok := strings.Cut(spec, "=")
		if !ok || strings.TrimSpace(login) == "" || file == "" {
			return nil, nil, fmt.Errorf("%w: --legacy-password-file %q: want LOGIN=FILE", errdefs.ErrInvalidInput, spec)
		}
		got, err := secret.Source{What: "the password of " + strings.TrimSpace(login), File: file, Flag: "--legacy-password-file"}.Resolve()
		if err != nil {
			return nil, nil, errdefs.Mark(err, errdefs.ErrInvalidInput)
		}
		pws[strings.TrimSpace(login)] = got.Value
	}
	return cfg, pws, nil
}

// developerKey reads the developer key (see secretSpec for the order of
// its sources); never argv.
func developerKey(s *settings.Settings) (string, error) {
	return developerKeySecret.read(s, legacy.CheckDeveloperKey, legacy.ErrDeveloperKey)
}

// hasDeveloperKey reports whether a developer key is given at all.
func hasDeveloperKey(s *settings.Settings) bool { return developerKeySecret.source(s).Given() }

// legacyIdentity builds who logs in; done releases the token, if opened.
func legacyIdentity(c *cli.Context, e *env, by legacy.Method) (legacy.Identity, func(), error) {
	sel, err := legacySelector(c, by)
	if err != nil {
		return legacy.Identity{}, func() {}, err
	}
	scheme, done := legacyScheme(c, e, nil)
	id, err := scheme.Identity(sel)
	return id, done, err
}

// legacySelector is the legacy identity the flags name.
func legacySelector(c *cli.Context, by legacy.Method) (authz.Selector, error) {
	sel := authz.Selector{Scheme: authz.SchemeLegacy, By: string(by)}
	if by == legacy.ByPassword {
		if sel.Login = strings.TrimSpace(c.String("login")); sel.Login == "" {
			return sel, usageErr(errors.New("--by password needs --login (or SIGNAGENT_LOGIN)"))
		}
	}
	return sel, nil
}

// legacyScheme is the legacy scheme as the flags configure it: a password
// from its sources (a prompt last), the token's certificate (opened when
// asked), an auth.sid from its sources or trusted authentication with the
// credential flags. done closes the token, if opened.
func legacyScheme(c *cli.Context, e *env, tokens *legacy.Tokens) (*legacy.Scheme, func()) {
	s := settings.Of(c)
	f := newFactory(c, e)
	scheme := &legacy.Scheme{
		Tokens:      tokens,
		Password:    func(login string) (string, error) { return readPassword(s, e, login) },
		Certificate: f.certificate,
		SidIdentity: func(authz.Selector) (legacy.Identity, error) { return sidIdentity(f) },
	}
	return scheme, f.close
}

// sidIdentity reads the auth.sid from --sid-file or $SIGNAGENT_SID, or runs
// trusted authentication on the token for the credential flags.
func sidIdentity(f *factory) (legacy.Identity, error) {
	c := f.c
	src := sidSecret.source(f.s)
	if src.Given() {
		got, err := src.Resolve()
		if err != nil {
			return legacy.Identity{}, errdefs.Mark(err, errdefs.ErrInvalidInput)
		}
		return staticSid(got.From, got.Value), nil
	}
	cred, err := credential(c)
	if err != nil {
		return legacy.Identity{}, usageErr(fmt.Errorf("--by sid needs --sid-file, SIGNAGENT_SID, or a trusted credential (--phone, --snils or --thumbprint) with --service-user-id: %w", err))
	}
	if _, err := selection(c); err != nil {
		return legacy.Identity{}, err
	}
	client, err := f.trusted(true)
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
func readPassword(s *settings.Settings, e *env, login string) (string, error) {
	src := passwordSecret.source(s)
	if tty, ok := e.stdin.(*os.File); ok {
		src.TTY, src.Out, src.Prompt = tty, e.stderr, "Password for "+login+": "
	}
	got, err := src.Resolve()
	if err != nil {
		return "", errdefs.Mark(err, errdefs.ErrInvalidInput)
	}
	return got.Value, nil
}
