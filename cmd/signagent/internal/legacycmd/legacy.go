package legacycmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/canonical"
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
	return cmdutil.Concat(legacyLoginFlags(), cmdutil.Pick(factory.ServeFlags(), "business-url", "developer-key-file", "legacy-token-ttl", "legacy-challenge-size"), cmdutil.Pick(cmdutil.CredentialFlags(), "phone", "snils", "thumbprint", "legacy-snils"), cmdutil.ServiceFlags(), cmdutil.TokenFlags(), factory.SignFlags(), extra)
}

func legacyTokenCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Description: cmdutil.SecretOutput("the legacy token") + cmdutil.Examples("signagent legacy token --by password --login alice --password-file pw", "signagent legacy token --by certificate", "signagent legacy token --by sid --sid-file sid"),
		Name:        "token",
		Usage:       "obtain a legacy authorization token (Authenticate V3) by password, certificate or auth.sid; print it",
		UsageText: "signagent legacy token --by password --login L\n" +
			"signagent legacy token --by certificate [token flags]\n" +
			"signagent legacy token --by sid [--sid-file F | --snils S --service-user-id ID]",
		Flags:  cmdutil.Concat(legacyCommandFlags(&cli.BoolFlag{Name: "json", Category: cmdutil.CatOutput, Usage: "print {\"token\",\"by\",\"obtainedAt\",\"expiresAt\"} (through the agent, no obtainedAt)"}), cmdutil.StoreFlags(), factory.AgentUseFlags()),
		Action: func(c *cli.Context) error { return runLegacyToken(c.Context, f, readLegacyToken(c)) },
	}
}

// loginOptions are who the legacy scheme logs in as, as the flags name
// them: the way in (--by) and the login of a password; for an auth.sid
// not given, the trusted credential and --service-user-id. The password
// and the auth.sid are read from their sources when a login runs.
type loginOptions struct {
	By    string
	BySet bool
	Login string
	// Cred is the trusted credential, CredErr why the flags give none:
	// only --by sid without an auth.sid needs one.
	Cred          canonical.Credential
	CredErr       error
	ServiceUserID string
	// Needs are the settings a legacy login here needs (the business
	// API's address, the developer key).
	Needs []cmdutil.Need
}

// readLogin reads the legacy scheme's login flags.
func readLogin(c *cli.Context) loginOptions {
	cred, err := cmdutil.Credential(c)
	return loginOptions{By: c.String("by"), BySet: c.IsSet("by"), Login: strings.TrimSpace(c.String("login")), Cred: cred, CredErr: err,
		ServiceUserID: c.String("service-user-id"), Needs: []cmdutil.Need{cmdutil.FlagNeed(c, "business-url"), cmdutil.DeveloperKeySpec.Need(settings.Of(c))}}
}

// legacyTokenOptions are what legacy token is told: who logs in, and
// how the token is printed.
type legacyTokenOptions struct {
	Login loginOptions
	JSON  bool
}

// readLegacyToken reads legacy token's flags.
func readLegacyToken(c *cli.Context) legacyTokenOptions {
	return legacyTokenOptions{Login: readLogin(c), JSON: c.Bool("json")}
}

// runLegacyToken prints the legacy token: the running agent's when one is
// asked, else one obtained here (through the shared store when there is
// one).
func runLegacyToken(ctx context.Context, f *factory.Factory, o legacyTokenOptions) error {
	if cl, err := f.Agent(); err != nil || cl != nil {
		if err != nil {
			return err
		}
		return legacyTokenFromAgent(ctx, f, cl, o)
	}
	tok, _, err := obtainLegacy(ctx, f, o.Login)
	if err != nil {
		return err
	}
	if o.JSON {
		return cmdutil.WriteJSON(f.Env, map[string]string{"token": tok.Value, "by": string(tok.By),
			"obtainedAt": cmdutil.JSONTime(tok.ObtainedAt), "expiresAt": cmdutil.JSONTime(tok.ExpiresAt)})
	}
	_, err = fmt.Fprintln(f.Stdout, tok.Value)
	return err
}

// legacyTokenFromAgent is the token of the agent's header for the
// identity the flags name.
func legacyTokenFromAgent(ctx context.Context, f *factory.Factory, cl *agentclient.Client, o legacyTokenOptions) error {
	req, err := agentRequest(f.Settings(), authz.SchemeLegacy, "", o.Login)
	if err != nil {
		return err
	}
	resp, err := f.AgentAuthorization(ctx, cl, req)
	if err != nil {
		return err
	}
	_, tok, ok := strings.Cut(resp.Authorization, ",ddauth_token=")
	if !ok || !strings.HasPrefix(resp.Authorization, legacy.HeaderScheme+" ") {
		return errdefs.Mark(errors.New("the agent's legacy header has no ddauth_token"), errdefs.ErrUnreachable)
	}
	if o.JSON {
		return cmdutil.WriteJSON(f.Env, map[string]string{"token": tok, "by": o.Login.By, "expiresAt": cmdutil.JSONTime(resp.ExpiresAt.Time)})
	}
	_, err = fmt.Fprintln(f.Stdout, tok)
	return err
}

// agentRequest is the identity the flags name as the body of the
// agent's POST /v1/authorizations (scheme as --scheme gives it): the
// profile of OpenID Connect; the login, the certificate, an auth.sid from
// its sources or a trusted credential for the legacy scheme. No password
// leaves this process: the agent holds the passwords it may use.
func agentRequest(s *settings.Settings, scheme, profile string, o loginOptions) (agentapi.AuthorizationRequest, error) {
	sel := authz.Selector{Scheme: scheme, By: o.By}.Normalize()
	req := agentapi.AuthorizationRequest{Scheme: sel.Scheme}
	if sel.Scheme != authz.SchemeLegacy {
		req.Profile = profile
		return req, nil
	}
	if sel.By == "" {
		return req, cmdutil.UsageErr(errors.New("--scheme legacy needs --by password, --by certificate or --by sid"))
	}
	by, err := legacy.ParseMethod(sel.By)
	if err != nil {
		return req, err
	}
	req.By = string(by)
	switch by {
	case legacy.ByPassword:
		if req.Login = o.Login; req.Login == "" {
			return req, cmdutil.UsageErr(errors.New("--by password needs --login (or SIGNAGENT_LOGIN)"))
		}
	case legacy.BySid:
		if src := cmdutil.SIDSpec.Source(s); src.Given() {
			got, err := src.Resolve()
			if err != nil {
				return req, errdefs.Mark(err, errdefs.ErrInvalidInput)
			}
			req.Sid = got.Value
			return req, nil
		}
		if o.CredErr != nil {
			return req, sidNeedsErr(o.CredErr)
		}
		req.Credential, req.ServiceUserID = cmdutil.APICredential(o.Cred), o.ServiceUserID
	}
	return req, nil
}

// sidNeedsErr says what --by sid needs when the flags give no trusted
// credential (why is err).
func sidNeedsErr(err error) error {
	return cmdutil.UsageErr(fmt.Errorf("--by sid needs --sid-file, SIGNAGENT_SID, or a trusted credential (--phone, --snils or --thumbprint) with --service-user-id: %w", err))
}

func headerCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Description: cmdutil.SecretOutput("the Authorization header, a bearer token or a legacy token") +
			cmdutil.Examples("signagent header", "signagent header --scheme legacy --by certificate --json", "curl -H \"Authorization: $(signagent header)\" URL"),
		Name:  "header",
		Usage: "print the Authorization header value of a business call",
		UsageText: "signagent header --scheme legacy --by password|certificate|sid [...]\n" +
			"signagent header --scheme oidc [--profile NAME]",
		Flags: cmdutil.Concat(legacyCommandFlags(schemeFlag("the authorization "+schemeUsage(false), schemeNames(false)...)),
			cmdutil.OIDCFlags(), []cli.Flag{cmdutil.ProfileFlag(), cmdutil.JSONFlag(`{"authorization","expiresAt"}`)}, factory.AgentUseFlags()),
		Action: cmdutil.Run(f, readHeader, runHeader),
	}
}

// schemeOptions are who header and api authorize as: the scheme (as
// --scheme gives it, and whether it was given), the legacy login and the
// OpenID Connect profile.
type schemeOptions struct {
	Scheme    string
	SchemeSet bool
	Login     loginOptions
	Profile   string
}

// readScheme reads header's and api's identity flags, refusing the
// legacy scheme's flags without --scheme legacy: with the default scheme
// they would be ignored without a word.
func readScheme(c *cli.Context) (schemeOptions, error) {
	o := schemeOptions{Scheme: c.String("scheme"), SchemeSet: c.IsSet("scheme"), Login: readLogin(c), Profile: cmdutil.ReadProfile(settings.Of(c))}
	if o.Login.BySet && !o.SchemeSet {
		return o, cmdutil.UsageErr(fmt.Errorf("--by %s is a way into the legacy scheme: add --scheme legacy (the default --scheme is oidc)", o.Login.By))
	}
	return o, nil
}

// headerOptions are what header is told: who, and how to print it.
type headerOptions struct {
	Who  schemeOptions
	JSON bool
}

// readHeader reads header's flags.
func readHeader(c *cli.Context) (headerOptions, error) {
	who, err := readScheme(c)
	return headerOptions{Who: who, JSON: c.Bool("json")}, err
}

// runHeader prints the Authorization header: the running agent's when
// one is asked, else from the schemes of the list as api builds them.
func runHeader(ctx context.Context, f *factory.Factory, o headerOptions) error {
	emit := func(header string, expires time.Time) error {
		if o.JSON {
			return cmdutil.WriteJSON(f.Env, map[string]any{"authorization": header, "expiresAt": cmdutil.JSONTime(expires)})
		}
		_, err := fmt.Fprintln(f.Stdout, header)
		return err
	}
	cl, err := f.Agent()
	if err != nil {
		return err
	}
	if cl != nil {
		req, err := agentRequest(f.Settings(), o.Who.Scheme, o.Who.Profile, o.Who.Login)
		if err != nil {
			return err
		}
		resp, err := f.AgentAuthorization(ctx, cl, req)
		if err != nil {
			return err
		}
		return emit(resp.Authorization, resp.ExpiresAt.Time)
	}
	// Here, from the schemes of the list as api builds them.
	if err := cmdutil.Missing(headerNeeds(o.Who)...); err != nil {
		return err
	}
	a, err := apiAuthorizer(f, o.Who)
	if err != nil {
		return orOtherScheme(o.Who, err)
	}
	h, err := a.Header(ctx)
	if err != nil {
		return orOtherScheme(o.Who, err)
	}
	f.Log.Info().Str("scheme", o.Who.Scheme).Str("identity", a.Identity()).Str("from", h.Source).
		Time("expiresAt", h.ExpiresAt).Msg("authorization header obtained")
	return emit(h.Value, h.ExpiresAt)
}

// schemeFlag is --scheme of header and api: one default for both,
// OpenID Connect, the service's recommendation; the values checked before
// the command runs, a mistyped one named (cmdutil.OneOf).
func schemeFlag(usage string, values ...string) cli.Flag {
	return cmdutil.OneOf(&cli.StringFlag{Name: "scheme", Category: cmdutil.CatOutput, Value: authz.SchemeOIDC, Usage: usage}, values...)
}

// orOtherScheme adds to a sign-in error of the default scheme that
// --scheme chooses another.
func orOtherScheme(o schemeOptions, err error) error {
	if o.SchemeSet || !errors.Is(err, errdefs.ErrSignIn) {
		return err
	}
	return fmt.Errorf("%w (--scheme oidc is the default; --scheme legacy --by password|certificate|sid for the legacy scheme)", err)
}

// obtainLegacy checks the flags, builds the identity (opening the token
// when the way in needs it) and authenticates.
func obtainLegacy(ctx context.Context, f *factory.Factory, o loginOptions) (legacy.Token, *legacy.Client, error) {
	if !o.BySet {
		return legacy.Token{}, nil, cmdutil.UsageErr(errors.New("give --by password, --by certificate or --by sid"))
	}
	by, err := legacy.ParseMethod(o.By)
	if err != nil {
		return legacy.Token{}, nil, err
	}
	if err := cmdutil.Missing(o.Needs...); err != nil {
		return legacy.Token{}, nil, err
	}
	client, err := f.Legacy()
	if err != nil {
		return legacy.Token{}, nil, err
	}
	sel, err := legacySelector(o, by)
	if err != nil {
		return legacy.Token{}, nil, err
	}
	id, err := legacyScheme(f, nil, o).Identity(sel)
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
		tok, _, err = tokens.Token(ctx, id)
	} else {
		tok, err = client.Authenticate(ctx, id)
	}
	if err != nil {
		return legacy.Token{}, nil, err
	}
	f.Log.Info().Str("by", string(by)).Str("subject", id.Subject).Str("token", secret.Mask(tok.Value)).
		Time("expiresAt", tok.ExpiresAt).Msg("legacy token obtained")
	return tok, client, nil
}

// legacySelector is the legacy identity the flags name.
func legacySelector(o loginOptions, by legacy.Method) (authz.Selector, error) {
	sel := authz.Selector{Scheme: authz.SchemeLegacy, By: string(by)}
	if by == legacy.ByPassword {
		if sel.Login = o.Login; sel.Login == "" {
			return sel, cmdutil.UsageErr(errors.New("--by password needs --login (or SIGNAGENT_LOGIN)"))
		}
	}
	return sel, nil
}

// legacyScheme is the legacy scheme as the flags configure it: a password
// from its sources (a prompt last), the token's certificate (opened when
// asked), an auth.sid from its sources or trusted authentication with the
// Credential flags.
func legacyScheme(f *factory.Factory, tokens *legacy.Tokens, o loginOptions) *legacy.Scheme {
	s, e := f.Settings(), f.Env
	return &legacy.Scheme{
		Tokens:      tokens,
		Password:    func(login string) (string, error) { return readPassword(s, e, login) },
		Certificate: f.Certificate,
		SidIdentity: func(authz.Selector) (legacy.Identity, error) { return sidIdentity(f, o) },
	}
}

// sidIdentity reads the auth.sid from --sid-file or $SIGNAGENT_SID, or runs
// Trusted authentication on the token for the credential flags.
func sidIdentity(f *factory.Factory, o loginOptions) (legacy.Identity, error) {
	s := f.Settings()
	src := cmdutil.SIDSpec.Source(s)
	if src.Given() {
		got, err := src.Resolve()
		if err != nil {
			return legacy.Identity{}, errdefs.Mark(err, errdefs.ErrInvalidInput)
		}
		return staticSid(got.From, got.Value), nil
	}
	if o.CredErr != nil {
		return legacy.Identity{}, sidNeedsErr(o.CredErr)
	}
	cred := o.Cred
	if _, err := cmdutil.SelectionFrom(s, true); err != nil {
		return legacy.Identity{}, err
	}
	client, err := f.Trusted(true)
	if err != nil {
		return legacy.Identity{}, err
	}
	userID := o.ServiceUserID
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
