package oidccmd

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

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/oidc/redirect"
)

func loginCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Description: cmdutil.Examples("signagent oidc login", "signagent oidc login --flow code", "signagent oidc login --profile robot --refresh-token-file rt"),
		Name:        "login",
		Usage:       "sign a user in with OpenID Connect (device or authorization-code flow) and keep the tokens",
		UsageText: "signagent oidc login --space staging|production [--flow device] [--no-qr]\n" +
			"signagent oidc login --flow code --redirect-uri http://127.0.0.1:PORT/callback [--no-browser]",
		Flags: cmdutil.Concat(oidcFlags(), []cli.Flag{cmdutil.ProfileFlag(),
			&cli.StringFlag{Name: "space", Category: cmdutil.CatOIDC, EnvVars: []string{"SIGNAGENT_SPACE"}, Usage: "`SPACE` of the service: staging (Service.PublicAPI.Staging) or production (Service.PublicAPI)"},
			&cli.StringSliceFlag{Name: "scope", Category: cmdutil.CatOIDC, Usage: "ask for `SCOPE` too (besides openid profile email offline_access and the space's)"},
			cmdutil.OneOf(&cli.StringFlag{Name: "flow", Category: cmdutil.CatOIDC, Value: "device", Usage: "`FLOW`: device (a code to enter on any device) or code (a browser on this machine)"}, "device", "code"),
			&cli.StringFlag{Name: "refresh-token-file", Category: cmdutil.CatOIDC, Usage: "sign in without a browser from a refresh token issued beforehand, read from `FILE` (a robot's start; checked by one refresh before it is kept)"},
			&cli.BoolFlag{Name: "no-qr", Category: cmdutil.CatOIDC, Usage: "device flow: do not draw the QR code"},
			&cli.StringFlag{Name: "redirect-uri", Category: cmdutil.CatOIDC, EnvVars: []string{"SIGNAGENT_REDIRECT_URI"}, Usage: "code flow: the redirect `URI` registered in the integrator's cabinet (loopback: signagent receives it)"},
			&cli.BoolFlag{Name: "no-browser", Category: cmdutil.CatOIDC, Usage: "code flow: do not open a browser; print the URL and read the redirected address pasted back (over SSH)"},
			&cli.DurationFlag{Name: "login-timeout", Category: cmdutil.CatOIDC, Value: 10 * time.Minute, Usage: "code flow: give up when the sign-in is not done after `DURATION`"},
		}),
		Action: cmdutil.Run(f, readLogin, runLogin),
	}
}

// loginOptions are what login is told: the profile, the provider and
// application, and the way in (a flow, or a refresh token's file) with
// its switches.
type loginOptions struct {
	Profile string
	// Client is the sign-in's provider, application, space, scopes and
	// redirect (the factory adds the secret and the service flags).
	Client           oidc.Config
	Flow             string
	RefreshTokenFile string
	NoQR             bool
	RedirectURI      string
	NoBrowser        bool
	LoginTimeout     time.Duration
}

// readLogin reads login's flags, every setting it cannot do without
// named at once.
func readLogin(c *cli.Context) (loginOptions, error) {
	s := settings.Of(c)
	oid := cmdutil.ReadOIDC(s)
	o := loginOptions{Profile: cmdutil.ReadProfile(s),
		Client: oidc.Config{AuthURL: oid.URL, ClientID: oid.ClientID, Space: s.String("space"), ExtraScopes: s.Strings("scope"), RedirectURI: s.String("redirect-uri")}, Flow: c.String("flow"),
		RefreshTokenFile: c.String("refresh-token-file"), NoQR: c.Bool("no-qr"), RedirectURI: c.String("redirect-uri"),
		NoBrowser: c.Bool("no-browser"), LoginTimeout: c.Duration("login-timeout")}
	if err := oidc.CheckProfile(o.Profile); err != nil {
		return o, err
	}
	if o.Flow != "device" && o.Flow != "code" {
		return o, cmdutil.UsageErr(fmt.Errorf("--flow %q: want device or code", o.Flow))
	}
	return o, cmdutil.Missing(cmdutil.FlagNeed(c, "space"), cmdutil.FlagNeed(c, "oidc-url"), cmdutil.FlagNeed(c, "client-id"), cmdutil.ClientSecretSpec.Need(s))
}

// runLogin signs the user in and keeps the profile's tokens.
func runLogin(parent context.Context, fac *factory.Factory, o loginOptions) error {
	e := fac.Env
	profile := o.Profile
	store, err := fac.OIDCRecords()
	if err != nil {
		return err
	}
	client, err := fac.OIDCClient(o.Client)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var rec *oidc.Record
	switch f := o.RefreshTokenFile; {
	case f != "":
		got, rerr := secret.Source{What: "the refresh token", Flag: "--refresh-token-file", File: f, Max: 16 << 10}.Resolve()
		if rerr != nil {
			return cmdutil.UsageErr(rerr)
		}
		rec, err = client.SignInWithRefreshToken(ctx, strings.TrimSpace(got.Value))
	case o.Flow == "device":
		rec, err = deviceLogin(ctx, o, e, client)
	default:
		rec, err = codeLogin(ctx, o, e, client)
	}
	if err != nil {
		if ctx.Err() != nil && parent.Err() == nil {
			return cmdutil.Exit(cmdutil.ExitInterrupted, errors.New("login interrupted; nothing was saved"))
		}
		return err
	}
	rec.Profile = profile
	if err := saveLogin(ctx, store, rec); err != nil {
		return err
	}
	e.Log.Info().Object("tokens", rec).Msg("signed in")
	fmt.Fprintf(e.Stdout, "Signed in as %s to %s (profile %s); the access token expires at %s.\n",
		factory.Who(rec), rec.Space(), profile, rec.Expiry.Local().Format(time.DateTime))
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

func deviceLogin(ctx context.Context, o loginOptions, e *cmdutil.Env, client *oidc.Client) (*oidc.Record, error) {
	d, err := client.StartDevice(ctx)
	if err != nil {
		return nil, err
	}
	// The instructions, the QR code and the wait go to stderr: stdout is
	// for the result.
	out := e.Stderr
	if d.VerificationURIComplete != "" {
		fmt.Fprintf(out, "To sign in, open %s\n", d.VerificationURIComplete)
		fmt.Fprintf(out, "or go to %s and enter the code %s\n", d.VerificationURI, d.UserCode)
	} else {
		fmt.Fprintf(out, "To sign in, go to %s and enter the code %s\n", d.VerificationURI, d.UserCode)
	}
	if f, ok := out.(*os.File); ok && secret.IsTerminal(f) && !o.NoQR {
		qr := d.VerificationURIComplete
		if qr == "" {
			qr = d.VerificationURI
		}
		qrterminal.GenerateHalfBlock(qr, qrterminal.L, out)
	}
	fmt.Fprintf(out, "Waiting for the approval (the code expires at %s; Ctrl-C to stop)...\n", d.Expiry.Local().Format(time.TimeOnly))
	return client.PollDevice(ctx, d)
}

func codeLogin(ctx context.Context, o loginOptions, e *cmdutil.Env, client *oidc.Client) (*oidc.Record, error) {
	req, err := client.StartCode(ctx)
	if err != nil {
		return nil, err
	}
	if err := client.CheckCode(ctx, req); err != nil {
		return nil, err
	}
	var redirects <-chan url.Values
	if !o.NoBrowser {
		recv, err := redirect.Listen(o.RedirectURI, req.State())
		if err != nil {
			return nil, err
		}
		defer recv.Close()
		redirects = recv.Redirects()
	}
	fmt.Fprintf(e.Stderr, "Open this address in a browser to sign in:\n  %s\n", req.URL)
	pasted := make(chan string, 1)
	if o.NoBrowser {
		fmt.Fprintf(e.Stderr, "After you allow access, the browser goes to %s?code=...\nPaste that whole address here: ", o.RedirectURI)
		go readLine(e, pasted)
	} else if err := openBrowser(req.URL); err != nil {
		e.Log.Debug().Err(err).Msg("no browser opened; open the address yourself")
	}
	timeout := time.NewTimer(o.LoginTimeout)
	defer timeout.Stop()
	var q url.Values
	select {
	case q = <-redirects:
	case line, ok := <-pasted:
		if !ok {
			return nil, cmdutil.UsageErr(errors.New("no redirected address was pasted (end of input)"))
		}
		if q, err = redirect.ParsePasted(line); err != nil {
			return nil, err
		}
	case <-timeout.C:
		return nil, fmt.Errorf("%w: the sign-in was not finished within --login-timeout %s", oidc.ErrSignIn, o.LoginTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return client.FinishCode(ctx, req, q)
}

func readLine(e *cmdutil.Env, out chan<- string) {
	sc := bufio.NewScanner(e.Stdin)
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
	// The browser, and all it starts, gets none of our secrets (the client
	// secret, a PIN) from the environment.
	cmd.Env = secret.ChildEnv(os.Environ())
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	return nil
}
