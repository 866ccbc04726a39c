package legacycmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/business"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/schemes"
)

func apiCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Name: "api",
		Description: cmdutil.Examples("signagent api /GetMyOrganizations", "signagent api '/GetMyEmployee?boxId=BOX' --scheme legacy --by certificate",
			"signagent api POST /Method --input body.json --include"),
		Args:  true, // checked by the command itself (its subcommands, or its own arguments)
		Usage: "call a business method with the Authorization header of a scheme and print the answer (like gh api)",
		UsageText: "signagent api [--scheme oidc] [--profile P] [GET] /GetMyOrganizations\n" +
			"signagent api --scheme legacy --by password --login L GET '/GetMyEmployee?boxId=...'\n" +
			"signagent api --scheme trusted --snils S --service-user-id ID /GetMyOrganizations",
		Flags: cmdutil.Concat(legacyCommandFlags(
			schemeFlag(schemeUsage(true), schemeNames(true)...),
			&cli.BoolFlag{Name: "include", Aliases: []string{"i"}, Category: cmdutil.CatOutput, Usage: "print the status line and the headers before the body"},
			&cli.StringFlag{Name: "input", Category: cmdutil.CatOutput, Usage: "send the body read from `FILE` (- for stdin)"},
		), cmdutil.OIDCFlags(), []cli.Flag{cmdutil.ProfileFlag()}, factory.MoreSchemeFlags(), factory.AgentUseFlags()),
		Action: cmdutil.Run(f, readAPI, runAPI),
	}
}

// apiOptions are what api is told: the call (method, path, query and
// where its body is read from), who makes it and how the answer is
// printed.
type apiOptions struct {
	Method  string
	Path    string
	Query   url.Values
	Input   string
	Include bool
	Who     schemeOptions
	// Needs are the settings the call needs here for its scheme.
	Needs []cmdutil.Need
}

// readAPI reads api's arguments and flags.
func readAPI(c *cli.Context) (apiOptions, error) {
	method, path, q, err := apiArgs(c)
	if err != nil {
		return apiOptions{}, err
	}
	who, err := readScheme(c)
	if err != nil {
		return apiOptions{}, err
	}
	return apiOptions{Method: method, Path: path, Query: q, Input: c.String("input"), Include: c.Bool("include"), Who: who,
		Needs: apiNeeds(c, who.Scheme)}, nil
}

// apiArgs reads [METHOD] PATH[?QUERY].
func apiArgs(c *cli.Context) (string, string, url.Values, error) {
	args := c.Args().Slice()
	method := http.MethodGet
	switch {
	case len(args) == 2:
		method = strings.ToUpper(args[0])
		args = args[1:]
	case len(args) != 1:
		return "", "", nil, cmdutil.UsageErr(errors.New("give the method's path, e.g. signagent api /GetMyOrganizations (optionally preceded by GET or POST)"))
	}
	if !slices.Contains([]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete}, method) {
		return "", "", nil, cmdutil.UsageErr(fmt.Errorf("HTTP method %q: want GET, POST, PUT or DELETE", method))
	}
	path, rawQuery, _ := strings.Cut(args[0], "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", "", nil, cmdutil.UsageErr(fmt.Errorf("the query of %q: %w", args[0], err))
	}
	if _, err := business.Path(path); err != nil {
		return "", "", nil, err
	}
	return method, path, q, nil
}

// runAPI makes the call: through the running agent when one is asked
// (its proxy, or its header), else with a scheme built here.
func runAPI(ctx context.Context, f *factory.Factory, o apiOptions) error {
	e := f.Env
	s := f.Settings()
	cl, err := f.Agent()
	if err != nil {
		return err
	}
	var body []byte
	if o.Input != "" {
		if body, err = readInput(e, o.Input); err != nil {
			return err
		}
	}
	var a authz.Authorizer
	if cl != nil {
		req, err := agentRequest(s, o.Who.Scheme, o.Who.Profile, o.Who.Login)
		if err != nil {
			return err
		}
		// Through the agent's proxy when the identity can be named there
		// (no header leaves the agent), else with the agent's header:
		// its caches serve every call either way.
		if text, ok := authz.OfRequest(req).Text(); ok && (o.Method == http.MethodGet || o.Method == http.MethodPost) {
			ans, err := cl.Call(ctx, o.Method, o.Path, o.Query, text, body, "application/json")
			if err != nil {
				return factory.AgentCallError(err)
			}
			return answer(e, o, &business.Response{Status: ans.Status, Header: ans.Header, Body: ans.Body})
		}
		a = &agentAuthorizer{Client: cl, Request: req}
	} else {
		if err := cmdutil.Missing(o.Needs...); err != nil {
			return err
		}
		if a, err = apiAuthorizer(f, o.Who); err != nil {
			return err
		}
	}
	svc, err := business.New(f.BusinessConfig(), a)
	if err != nil {
		return err
	}
	r, err := svc.Do(ctx, o.Method, o.Path, o.Query, body, "application/json")
	if err != nil {
		return orOtherScheme(o.Who, err)
	}
	return answer(e, o, r)
}

// answer prints the service's answer; a status other than 2xx is the
// command's error.
func answer(e *cmdutil.Env, o apiOptions, r *business.Response) error {
	printAnswer(e, r, o.Include)
	if r.Status >= 300 {
		// The answer's text is on stdout already: the error line says
		// the status and code once, not the text again.
		se := business.AsError(strings.TrimPrefix(o.Path, "/"), r, o.Query.Get("boxId"))
		se.Message = ""
		return se
	}
	return nil
}

func readInput(e *cmdutil.Env, f string) ([]byte, error) {
	if f == "-" {
		var b bytes.Buffer
		_, err := b.ReadFrom(e.Stdin)
		return b.Bytes(), err
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, cmdutil.UsageErr(fmt.Errorf("--input: %w", err))
	}
	return b, nil
}

// printAnswer writes the body (indented JSON on a terminal), after the
// status line and headers with --include.
func printAnswer(e *cmdutil.Env, r *business.Response, include bool) {
	if include {
		fmt.Fprintf(e.Stdout, "HTTP %d %s\n", r.Status, http.StatusText(r.Status))
		r.Header.Write(e.Stdout)
		fmt.Fprintln(e.Stdout)
	}
	out := r.Body
	if f, ok := e.Stdout.(*os.File); ok && secret.IsTerminal(f) {
		var b bytes.Buffer
		if json.Indent(&b, r.Body, "", "  ") == nil {
			out = b.Bytes()
		}
	}
	e.Stdout.Write(out)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		fmt.Fprintln(e.Stdout)
	}
}

// apiNeeds are the settings signagent api needs here for its scheme: the
// API address; the developer key for the legacy scheme; the API key and
// the auth address too for trusted authentication.
func apiNeeds(c *cli.Context, scheme string) []cmdutil.Need {
	s := settings.Of(c)
	needs := []cmdutil.Need{cmdutil.FlagNeed(c, "business-url")}
	switch strings.ToLower(scheme) {
	case authz.SchemeTrusted:
		needs = append(needs, cmdutil.DeveloperKeySpec.Need(s), cmdutil.APIKeySpec.Need(s), cmdutil.FlagNeed(c, "trusted-url"))
	case authz.SchemeLegacy:
		needs = append(needs, cmdutil.DeveloperKeySpec.Need(s))
	}
	return needs
}

// headerNeeds are the settings signagent header needs here for its
// scheme: the legacy scheme logs in (the API address, the developer key).
func headerNeeds(o schemeOptions) []cmdutil.Need {
	if strings.EqualFold(o.Scheme, authz.SchemeLegacy) {
		return o.Login.Needs
	}
	return nil
}

// apiAuthorizer is the Authorizer of the identity the flags name, from
// the schemes configured by them (apiSchemes).
func apiAuthorizer(f *factory.Factory, o schemeOptions) (authz.Authorizer, error) {
	sel := authz.Selector{Scheme: o.Scheme, By: o.Login.By, Profile: o.Profile}.Normalize()
	if sel.Scheme == authz.SchemeLegacy {
		if sel.By == "" {
			return nil, cmdutil.UsageErr(errors.New("--scheme legacy needs --by password, --by certificate or --by sid"))
		}
		by, err := legacy.ParseMethod(sel.By)
		if err != nil {
			return nil, err
		}
		if sel, err = legacySelector(o.Login, by); err != nil {
			return nil, err
		}
	}
	list, err := apiSchemes(f, o.Login)
	if err != nil {
		return nil, err
	}
	a, err := list.Authorizer(sel)
	if err != nil {
		if errors.Is(err, errdefs.ErrInvalidInput) && !slices.Contains(list.Names(), sel.Scheme) {
			err = cmdutil.UsageErr(fmt.Errorf("--scheme %q: want %s or trusted", o.Scheme, strings.Join(list.Names(), ", ")))
		}
		return nil, err
	}
	return a, nil
}

// apiSchemes are the schemes signagent api and header call with, built
// from the one list (schemes.List) as the flags configure them (--scheme
// trusted is legacy by sid: authz.Selector.Normalize); a scheme the flags
// do not configure says what it lacks when used. The command opens --store
// once and lends it as the agent lends its own: the schemes keep their
// records there (the OpenID Connect records, and the legacy tokens that
// legacy token and the agents share); it also lends a password from its
// sources, the token (opened when asked) and an auth.sid from the flags.
// A login or refresh is bounded by the schemes' own limits (a legacy
// login 2 minutes, a refresh 60 s), not by --request-timeout, which
// bounds each request: a login may wait on a PIN typed at a prompt, and
// --attempts tries a request again within it. What they open is the
// factory's, closed when the run ends.
func apiSchemes(f *factory.Factory, o loginOptions) (authz.Schemes, error) {
	shared, err := f.Store()
	if err != nil {
		return nil, err
	}
	s, e := f.Settings(), f.Env
	d := schemes.Deps{Log: e.Log, Decrypter: f.Certificate,
		Password: func(login string) (string, error) { return readPassword(s, e, login) },
		Sid: func(authz.Selector) (schemes.Sid, error) {
			id, err := sidIdentity(f, o)
			return schemes.Sid{Subject: id.Subject, CacheKey: id.CacheKey, Get: id.Sid, Drop: id.Drop}, err
		}}
	if shared != nil {
		d.Store = shared
	}
	return schemes.Build(nil, f.SchemeSettings(), d)
}

// trustedHelp is what names a trusted user in api (--scheme trusted).
const trustedHelp = "the credential and --service-user-id: trusted authentication, then Authenticate type=sid"

// schemeUsage is the help of header's and api's --scheme: each scheme of
// the list, the default first, with what names its identities, and with
// trusted, trusted (api's).
func schemeUsage(trusted bool) string {
	help := map[string]string{authz.SchemeTrusted: trustedHelp}
	for _, e := range schemes.List() {
		help[e.Name] = e.Help
	}
	names := schemeNames(trusted)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n
		if h := help[n]; h != "" {
			parts[i] += " (" + h + ")"
		}
	}
	return "`SCHEME`: " + strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}

// schemeNames are the values of header's and api's --scheme: every
// scheme of the list (schemes.List), the default first, and with trusted,
// trusted (a legacy identity by trusted authentication: api's).
func schemeNames(trusted bool) []string {
	names := []string{authz.SchemeOIDC}
	for _, e := range schemes.List() {
		if e.Name != authz.SchemeOIDC {
			names = append(names, e.Name)
		}
	}
	if trusted {
		names = append(names, authz.SchemeTrusted)
	}
	return names
}
