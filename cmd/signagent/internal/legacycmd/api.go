package legacycmd

import (
	"bytes"
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
		), factory.OIDCFlags(), []cli.Flag{factory.ProfileFlag()}, factory.MoreSchemeFlags(), factory.AgentUseFlags()),
		Action: func(c *cli.Context) error { return callAPI(c, f) },
	}
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

func callAPI(c *cli.Context, f *factory.Factory) error {
	e := f.Env
	method, path, q, err := apiArgs(c)
	if err != nil {
		return err
	}
	if err := checkScheme(c); err != nil {
		return err
	}
	s := f.Settings()
	cl, err := f.Agent()
	if err != nil {
		return err
	}
	var body []byte
	if in := c.String("input"); in != "" {
		if body, err = readInput(e, in); err != nil {
			return err
		}
	}
	var a authz.Authorizer
	if cl != nil {
		req, err := f.AgentAuthRequest(c.String("scheme"))
		if err != nil {
			return err
		}
		// Through the agent's proxy when the identity can be named there
		// (no header leaves the agent), else with the agent's header:
		// its caches serve every call either way.
		if text, ok := authz.OfRequest(req).Text(); ok && (method == http.MethodGet || method == http.MethodPost) {
			ans, err := cl.Call(c.Context, method, path, q, text, body, "application/json")
			if err != nil {
				return factory.AgentCallError(err)
			}
			return answer(c, e, path, q, &business.Response{Status: ans.Status, Header: ans.Header, Body: ans.Body})
		}
		a = &agentAuthorizer{Client: cl, Request: req}
	} else {
		if err := cmdutil.Missing(apiNeeds(c, s)...); err != nil {
			return err
		}
		if a, err = apiAuthorizer(c, f); err != nil {
			return err
		}
	}
	svc, err := business.New(business.Config{APIURL: s.String("business-url"), AllowInsecureHTTP: s.Bool("insecure-http"),
		Timeout: s.Duration("request-timeout"), UserAgent: "signagent/" + cmdutil.Version}, a)
	if err != nil {
		return err
	}
	r, err := svc.Do(c.Context, method, path, q, body, "application/json")
	if err != nil {
		return orOtherScheme(c, err)
	}
	return answer(c, e, path, q, r)
}

// answer prints the service's answer; a status other than 2xx is the
// command's error.
func answer(c *cli.Context, e *cmdutil.Env, path string, q url.Values, r *business.Response) error {
	printAnswer(e, r, c.Bool("include"))
	if r.Status >= 300 {
		// The answer's text is on stdout already: the error line says
		// the status and code once, not the text again.
		se := business.AsError(strings.TrimPrefix(path, "/"), r, q.Get("boxId"))
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
func apiNeeds(c *cli.Context, s *settings.Settings) []cmdutil.Need {
	needs := []cmdutil.Need{cmdutil.FlagNeed(c, "business-url")}
	switch strings.ToLower(c.String("scheme")) {
	case authz.SchemeTrusted:
		needs = append(needs, cmdutil.DeveloperKeySpec.Need(s), cmdutil.APIKeySpec.Need(s), cmdutil.FlagNeed(c, "trusted-url"))
	case authz.SchemeLegacy:
		needs = append(needs, cmdutil.DeveloperKeySpec.Need(s))
	}
	return needs
}

// headerNeeds are the settings signagent header needs here for its
// scheme: the legacy scheme logs in (the API address, the developer key).
func headerNeeds(c *cli.Context, s *settings.Settings) []cmdutil.Need {
	if strings.EqualFold(c.String("scheme"), authz.SchemeLegacy) {
		return []cmdutil.Need{cmdutil.FlagNeed(c, "business-url"), cmdutil.DeveloperKeySpec.Need(s)}
	}
	return nil
}

// apiAuthorizer is the Authorizer of the identity the flags name, from
// the schemes configured by them (apiSchemes).
func apiAuthorizer(c *cli.Context, f *factory.Factory) (authz.Authorizer, error) {
	sel := authz.Selector{Scheme: c.String("scheme"), By: c.String("by"), Profile: f.Settings().String("profile")}.Normalize()
	if sel.Scheme == authz.SchemeLegacy {
		if sel.By == "" {
			return nil, cmdutil.UsageErr(errors.New("--scheme legacy needs --by password, --by certificate or --by sid"))
		}
		by, err := legacy.ParseMethod(sel.By)
		if err != nil {
			return nil, err
		}
		if sel, err = legacySelector(c, by); err != nil {
			return nil, err
		}
	}
	list, err := apiSchemes(f)
	if err != nil {
		return nil, err
	}
	a, err := list.Authorizer(sel)
	if err != nil {
		if errors.Is(err, errdefs.ErrInvalidInput) && !slices.Contains(list.Names(), sel.Scheme) {
			err = cmdutil.UsageErr(fmt.Errorf("--scheme %q: want %s or trusted", c.String("scheme"), strings.Join(list.Names(), ", ")))
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
func apiSchemes(f *factory.Factory) (authz.Schemes, error) {
	shared, err := f.Store()
	if err != nil {
		return nil, err
	}
	s, e := f.Settings(), f.Env
	d := schemes.Deps{Log: e.Log, Decrypter: f.Certificate,
		Password: func(login string) (string, error) { return readPassword(s, e, login) },
		Sid: func(authz.Selector) (schemes.Sid, error) {
			id, err := sidIdentity(f)
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
