package main

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
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/internal/settings"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/service"
)

func apiCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "api",
		Usage: "call a business method with the Authorization header of a scheme and print the answer (like gh api)",
		UsageText: "signagent api [--scheme oidc] [--profile P] [GET] /GetMyOrganizations\n" +
			"signagent api --scheme legacy --by password --login L GET '/GetMyEmployee?boxId=...'\n" +
			"signagent api --scheme trusted --snils S --service-user-id ID /GetMyOrganizations",
		Flags: concat(legacyCommandFlags(
			&cli.StringFlag{Name: "scheme", Category: catOutput, Value: "oidc", Usage: "`SCHEME`: oidc (a signed-in --profile), legacy (--by password|certificate|sid) or trusted (the credential and --service-user-id: trusted authentication, then Authenticate type=sid)"},
			&cli.BoolFlag{Name: "include", Aliases: []string{"i"}, Category: catOutput, Usage: "print the status line and the headers before the body"},
			&cli.StringFlag{Name: "input", Category: catOutput, Usage: "send the body read from `FILE` (- for stdin)"},
		), oidcHeaderFlags()),
		Action: func(c *cli.Context) error { return callAPI(c, e) },
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
		return "", "", nil, usageErr(errors.New("give the method's path, e.g. signagent api /GetMyOrganizations (optionally preceded by GET or POST)"))
	}
	if !slices.Contains([]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete}, method) {
		return "", "", nil, usageErr(fmt.Errorf("HTTP method %q: want GET, POST, PUT or DELETE", method))
	}
	path, rawQuery, _ := strings.Cut(args[0], "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", "", nil, usageErr(fmt.Errorf("the query of %q: %w", args[0], err))
	}
	if _, err := service.Path(path); err != nil {
		return "", "", nil, err
	}
	return method, path, q, nil
}

func callAPI(c *cli.Context, e *env) error {
	method, path, q, err := apiArgs(c)
	if err != nil {
		return err
	}
	s := settings.Of(c)
	a, done, err := apiAuthorizer(c, e, s)
	if err != nil {
		return err
	}
	defer done()
	svc, err := service.New(service.Config{APIURL: s.String("api-url"), AllowInsecureHTTP: s.Bool("insecure-http"),
		Timeout: s.Duration("request-timeout"), UserAgent: "signagent/" + version}, a)
	if err != nil {
		return err
	}
	var body []byte
	if f := c.String("input"); f != "" {
		if body, err = readInput(e, f); err != nil {
			return err
		}
	}
	r, err := svc.Do(c.Context, method, path, q, body, "application/json")
	if err != nil {
		return err
	}
	printAnswer(e, r, c.Bool("include"))
	if r.Status >= 300 {
		return service.AsError(strings.TrimPrefix(path, "/"), r, q.Get("boxId"))
	}
	return nil
}

func readInput(e *env, f string) ([]byte, error) {
	if f == "-" {
		var b bytes.Buffer
		_, err := b.ReadFrom(e.stdin)
		return b.Bytes(), err
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, usageErr(fmt.Errorf("--input: %w", err))
	}
	return b, nil
}

// printAnswer writes the body (indented JSON on a terminal), after the
// status line and headers with --include.
func printAnswer(e *env, r *service.Response, include bool) {
	if include {
		fmt.Fprintf(e.stdout, "HTTP %d %s\n", r.Status, http.StatusText(r.Status))
		r.Header.Write(e.stdout)
		fmt.Fprintln(e.stdout)
	}
	out := r.Body
	if f, ok := e.stdout.(*os.File); ok && secret.IsTerminal(f) {
		var b bytes.Buffer
		if json.Indent(&b, r.Body, "", "  ") == nil {
			out = b.Bytes()
		}
	}
	e.stdout.Write(out)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		fmt.Fprintln(e.stdout)
	}
}

// apiAuthorizer is the scheme's Authorizer for the identity flags; done
// releases the token when one was opened.
func apiAuthorizer(c *cli.Context, e *env, s *settings.Settings) (authz.Authorizer, func(), error) {
	sel := authz.Selector{Scheme: c.String("scheme"), By: c.String("by")}.Normalize()
	for _, sc := range apiSchemes {
		if sc.name == sel.Scheme {
			return sc.authorizer(c, e, s, sel)
		}
	}
	return nil, func() {}, usageErr(fmt.Errorf("--scheme %q: want oidc, legacy or trusted", c.String("scheme")))
}

// apiSchemes are the schemes signagent api calls with (--scheme trusted is
// legacy by sid: authz.Selector.Normalize).
var apiSchemes = []struct {
	name       string
	authorizer func(c *cli.Context, e *env, s *settings.Settings, sel authz.Selector) (authz.Authorizer, func(), error)
}{
	{authz.SchemeOIDC, oidcAPIAuthorizer},
	{authz.SchemeLegacy, legacyAPIAuthorizer},
}

func oidcAPIAuthorizer(_ *cli.Context, e *env, s *settings.Settings, _ authz.Selector) (authz.Authorizer, func(), error) {
	tk, err := oidcTokens(s, e)
	if err != nil {
		return nil, func() {}, err
	}
	return tk.For(s.String("profile")), func() {}, nil
}

func legacyAPIAuthorizer(c *cli.Context, e *env, s *settings.Settings, sel authz.Selector) (authz.Authorizer, func(), error) {
	none := func() {}
	if sel.By == "" {
		return nil, none, usageErr(errors.New("--scheme legacy needs --by password, --by certificate or --by sid"))
	}
	by, err := legacy.ParseMethod(sel.By)
	if err != nil {
		return nil, none, err
	}
	client, err := legacyClient(s, e)
	if err != nil {
		return nil, none, err
	}
	id, done, err := legacyIdentity(c, e, by)
	if err != nil {
		return nil, none, err
	}
	return legacy.NewTokens(client, 0, s.Duration("request-timeout")).For(id), done, nil
}
