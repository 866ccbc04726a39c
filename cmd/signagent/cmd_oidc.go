package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mdp/qrterminal/v3"
	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/internal/settings"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/store"
)

const (
	catOIDC  = "OpenID Connect"
	catStore = "Shared store"
)

// oidcFlags say which application signs in where, and where the tokens
// are kept; the agent takes them too.
func oidcFlags() []cli.Flag {
	return append(storeFlags(), []cli.Flag{
		&cli.StringFlag{Name: "auth-url", Category: catOIDC, EnvVars: []string{"SIGNAGENT_AUTH_URL"}, Usage: "the identity provider's `URL` ({auth_url}; /connect/* is below it)"},
		&cli.StringFlag{Name: "client-id", Category: catOIDC, EnvVars: []string{"SIGNAGENT_CLIENT_ID"}, Usage: "the application's `CLIENT_ID`"},
		clientSecretSecret.flagWith(catOIDC, ""),
		tokenStoreFlag(),
		&cli.DurationFlag{Name: "refresh-before", Category: catOIDC, Value: oidc.DefaultRefreshBefore, EnvVars: []string{"SIGNAGENT_REFRESH_BEFORE"}, Usage: "refresh an access token with less than `DURATION` left (or an eighth of its lifetime, when shorter)"},
		&cli.BoolFlag{Name: "insecure-http", Category: catOIDC, EnvVars: []string{"SIGNAGENT_INSECURE_HTTP"}, Usage: "allow plain http to a non-loopback identity provider"},
		&cli.DurationFlag{Name: "request-timeout", Category: catOIDC, Value: 15 * time.Second, EnvVars: []string{"SIGNAGENT_REQUEST_TIMEOUT"}, Usage: "give up on one request after `DURATION`"},
	}...)
}

// oidcAgentFlags are the OpenID Connect flags of commands that have
// --insecure-http and --request-timeout already (header, serve).
func oidcAgentFlags() []cli.Flag {
	var out []cli.Flag
	for _, f := range oidcFlags() {
		if n := f.Names()[0]; n != "insecure-http" && n != "request-timeout" {
			out = append(out, f)
		}
	}
	return out
}

func oidcHeaderFlags() []cli.Flag { return append(oidcAgentFlags(), profileFlag()) }

// oidcAgentConfig is the agent's OpenID Connect scheme: the token store
// operators sign in to (in shared, the agent's store, when there is one),
// and the client secret (read once; without one the agent serves fresh
// tokens and answers 503 to what needs a refresh).
func oidcAgentConfig(s *settings.Settings, e *env, shared *store.Shared) (*oidc.Tokens, error) {
	records, err := oidcRecords(s, shared)
	if err != nil {
		// The local files only: a shared store is never dropped.
		e.log.Warn().Err(err).Msg("no token store: oidc authorizations answer 503")
		return nil, nil
	}
	sec, err := clientSecret(s)
	if err != nil {
		return nil, err
	}
	return &oidc.Tokens{Store: records, Before: s.Duration("refresh-before"), Client: func(rec *oidc.Record) (*oidc.Client, error) {
		if sec == "" {
			return nil, agent.ErrOIDCSecret
		}
		return refreshClient(s, e, rec, sec)
	}}, nil
}

func tokenStoreFlag() cli.Flag {
	return &cli.StringFlag{Name: "token-store", Category: catOIDC, EnvVars: []string{"SIGNAGENT_TOKEN_STORE"}, Usage: "keep the tokens in `DIR` (default $XDG_STATE_HOME/signagent, else ~/.local/state/signagent)"}
}

func profileFlag() cli.Flag {
	return &cli.StringFlag{Name: "profile", Category: catOIDC, Value: "default", EnvVars: []string{"SIGNAGENT_PROFILE"}, Usage: "the token store's `NAME` for this sign-in"}
}

func loginCommand(e *env) *cli.Command {
	return &cli.Command{
		Description: examples("signagent login", "signagent login --flow code", "signagent login --profile robot --refresh-token-file rt"),
		Name:        "login",
		Usage:       "sign a user in with OpenID Connect (device or authorization-code flow) and keep the tokens",
		UsageText: "signagent login --space staging|production [--flow device] [--no-qr]\n" +
			"signagent login --flow code --redirect-uri http://127.0.0.1:PORT/callback [--no-browser]",
		Flags: concat(oidcFlags(), []cli.Flag{profileFlag(),
			&cli.StringFlag{Name: "space", Category: catOIDC, EnvVars: []string{"SIGNAGENT_SPACE"}, Usage: "`SPACE` of the service: staging (Service.PublicAPI.Staging) or production (Service.PublicAPI)"},
			&cli.StringSliceFlag{Name: "scope", Category: catOIDC, Usage: "ask for `SCOPE` too (besides openid profile email offline_access and the space's)"},
			&cli.StringFlag{Name: "flow", Category: catOIDC, Value: "device", Usage: "`FLOW`: device (a code to enter on any device) or code (a browser on this machine)"},
			&cli.StringFlag{Name: "refresh-token-file", Category: catOIDC, Usage: "sign in without a browser from a refresh token issued beforehand, read from `FILE` (a robot's start; checked by one refresh before it is kept)"},
			&cli.BoolFlag{Name: "no-qr", Category: catOIDC, Usage: "device flow: do not draw the QR code"},
			&cli.StringFlag{Name: "redirect-uri", Category: catOIDC, EnvVars: []string{"SIGNAGENT_REDIRECT_URI"}, Usage: "code flow: the redirect `URI` registered in the integrator's cabinet (loopback: signagent receives it)"},
			&cli.BoolFlag{Name: "no-browser", Category: catOIDC, Usage: "code flow: do not open a browser; print the URL and read the redirected address pasted back (over SSH)"},
			&cli.DurationFlag{Name: "login-timeout", Category: catOIDC, Value: 10 * time.Minute, Usage: "code flow: give up when the sign-in is not done after `DURATION`"},
		}),
		Action: func(c *cli.Context) error { return login(c, e) },
	}
}

func login(c *cli.Context, e *env) error {
	s := settings.Of(c)
	profile := s.String("profile")
	if err := oidc.CheckProfile(profile); err != nil {
		return err
	}
	flow := c.String("flow")
	if flow != "device" && flow != "code" {
		return usageErr(fmt.Errorf("--flow %q: want device or code", flow))
	}
	if err := missing(flagNeed(c, "space"), flagNeed(c, "auth-url"), flagNeed(c, "client-id"), clientSecretSecret.need(s)); err != nil {
		return err
	}
	store, err := tokenStore(s)
	if err != nil {
		return err
	}
	client, err := oidcClient(s, e, s.String("auth-url"), s.String("client-id"))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var rec *oidc.Record
	switch f := c.String("refresh-token-file"); {
	case f != "":
		got, rerr := secret.Source{What: "the refresh token", Flag: "--refresh-token-file", File: f, Max: 16 << 10}.Resolve()
		if rerr != nil {
			return usageErr(rerr)
		}
		rec, err = client.SignInWithRefreshToken(ctx, strings.TrimSpace(got.Value))
	case flow == "device":
		rec, err = deviceLogin(ctx, c, e, client)
	default:
		rec, err = codeLogin(ctx, c, e, client)
	}
	if err != nil {
		if ctx.Err() != nil && c.Context.Err() == nil {
			return &exitError{exitInterrupted, errors.New("login interrupted; nothing was saved")}
		}
		return err
	}
	rec.Profile = profile
	if err := saveLogin(ctx, store, rec); err != nil {
		return err
	}
	e.log.Info().Object("tokens", rec).Msg("signed in")
	fmt.Fprintf(e.stdout, "Signed in as %s to %s (profile %s); the access token expires at %s.\n",
		who(rec), rec.Space(), profile, rec.Expiry.Local().Format(time.DateTime))
	return nil
}

// saveLogin replaces the profile's tokens under its lock, so that a
// refresh running meanwhile does not write over the new sign-in.
func saveLogin(ctx context.Context, store oidc.Records, rec *oidc.Record) error {
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	unlock, err := store.Lock(lctx, rec.Profile)
	if err != nil {
		return err
	}
	defer unlock()
	return store.Save(rec)
}

func who(r *oidc.Record) string {
	if r.Email != "" {
		return fmt.Sprintf("%s (%s)", r.Subject, r.Email)
	}
	return r.Subject
}

func deviceLogin(ctx context.Context, c *cli.Context, e *env, client *oidc.Client) (*oidc.Record, error) {
	d, err := client.StartDevice(ctx)
	if err != nil {
		return nil, err
	}
	// The instructions, the QR code and the wait go to stderr: stdout is
	// for the result.
	out := e.stderr
	if d.VerificationURIComplete != "" {
		fmt.Fprintf(out, "To sign in, open %s\n", d.VerificationURIComplete)
		fmt.Fprintf(out, "or go to %s and enter the code %s\n", d.VerificationURI, d.UserCode)
	} else {
		fmt.Fprintf(out, "To sign in, go to %s and enter the code %s\n", d.VerificationURI, d.UserCode)
	}
	if f, ok := out.(*os.File); ok && secret.IsTerminal(f) && !c.Bool("no-qr") {
		qr := d.VerificationURIComplete
		if qr == "" {
			qr = d.VerificationURI
		}
		qrterminal.GenerateHalfBlock(qr, qrterminal.L, out)
	}
	fmt.Fprintf(out, "Waiting for the approval (the code expires at %s; Ctrl-C to stop)...\n", d.Expiry.Local().Format(time.TimeOnly))
	return client.PollDevice(ctx, d)
}

func codeLogin(ctx context.Context, c *cli.Context, e *env, client *oidc.Client) (*oidc.Record, error) {
	req, err := client.StartCode(ctx)
	if err != nil {
		return nil, err
	}
	if err := client.CheckCode(ctx, req); err != nil {
		return nil, err
	}
	var redirects <-chan url.Values
	if !c.Bool("no-browser") {
		recv, err := oidc.Listen(c.String("redirect-uri"), req)
		if err != nil {
			return nil, err
		}
		defer recv.Close()
		redirects = recv.Redirects()
	}
	fmt.Fprintf(e.stderr, "Open this address in a browser to sign in:\n  %s\n", req.URL)
	pasted := make(chan string, 1)
	if c.Bool("no-browser") {
		fmt.Fprintf(e.stderr, "After you allow access, the browser goes to %s?code=...\nPaste that whole address here: ", c.String("redirect-uri"))
		go readLine(e, pasted)
	} else if err := openBrowser(req.URL); err != nil {
		e.log.Debug().Err(err).Msg("no browser opened; open the address yourself")
	}
	timeout := time.NewTimer(c.Duration("login-timeout"))
	defer timeout.Stop()
	var q url.Values
	select {
	case q = <-redirects:
	case line, ok := <-pasted:
		if !ok {
			return nil, usageErr(errors.New("no redirected address was pasted (end of input)"))
		}
		if q, err = oidc.ParsePasted(line); err != nil {
			return nil, err
		}
	case <-timeout.C:
		return nil, fmt.Errorf("%w: the sign-in was not finished within --login-timeout %s", oidc.ErrSignIn, c.Duration("login-timeout"))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return client.FinishCode(ctx, req, q)
}

func readLine(e *env, out chan<- string) {
	sc := bufio.NewScanner(e.stdin)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	if sc.Scan() {
		out <- sc.Text()
	}
	close(out)
}

// openBrowser opens url with $BROWSER, else xdg-open when there is a
// display; it does not wait for the browser.
func openBrowser(u string) error {
	name := os.Getenv("BROWSER")
	if name == "" {
		if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
			return errors.New("no display")
		}
		name = "xdg-open"
	}
	cmd := exec.Command(name, u)
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	return nil
}

// oidcClient builds the client for an identity provider and application,
// with the secret from $SIGNAGENT_CLIENT_SECRET or --client-secret-file.
func oidcClient(s *settings.Settings, e *env, authURL, clientID string) (*oidc.Client, error) {
	sec, err := clientSecret(s)
	if err != nil {
		return nil, err
	}
	return oidc.New(oidc.Config{AuthURL: authURL, AllowInsecureHTTP: s.Bool("insecure-http"), ClientID: clientID,
		ClientSecret: sec, Space: s.String("space"), ExtraScopes: s.Strings("scope"), RedirectURI: s.String("redirect-uri"),
		Timeout: s.Duration("request-timeout"), Log: e.log})
}

// clientSecret reads the client secret (see secretSpec for the order of
// its sources); none is not an error here: oidc.New says what to give.
func clientSecret(s *settings.Settings) (string, error) {
	if !clientSecretSecret.source(s).Given() {
		return "", nil
	}
	return clientSecretSecret.read(s, oidc.CheckSecret, errdefs.ErrInvalidInput)
}

// oidcTokens hands out the profiles' tokens, refreshing with a client for
// the provider and application each profile signed in with.
func oidcTokens(s *settings.Settings, e *env) (*oidc.Tokens, error) {
	records, err := tokenStore(s)
	if err != nil {
		return nil, err
	}
	return &oidc.Tokens{Store: records, Before: s.Duration("refresh-before"), Client: func(rec *oidc.Record) (*oidc.Client, error) {
		sec, err := clientSecret(s)
		if err != nil {
			return nil, err
		}
		return refreshClient(s, e, rec, sec)
	}}, nil
}

// refreshClient is the client that refreshes rec: its provider and
// client_id; a different --auth-url or --client-id is a mistake.
func refreshClient(s *settings.Settings, e *env, rec *oidc.Record, sec string) (*oidc.Client, error) {
	for _, f := range []struct{ flag, want string }{{"auth-url", rec.AuthURL}, {"client-id", rec.ClientID}} {
		if v := s.String(f.flag); v != "" && strings.TrimRight(v, "/") != f.want {
			return nil, fmt.Errorf("%w: profile %q was signed in with --%s %s, not %s; sign in again to change it",
				errdefs.ErrInvalidInput, rec.Profile, f.flag, f.want, v)
		}
	}
	space := rec.Space()
	if space == "" {
		space = oidc.SpaceStaging // a refresh sends no scope
	}
	return oidc.New(oidc.Config{AuthURL: rec.AuthURL, AllowInsecureHTTP: s.Bool("insecure-http"), ClientID: rec.ClientID,
		ClientSecret: sec, Space: space, Timeout: s.Duration("request-timeout"), Log: e.log})
}
