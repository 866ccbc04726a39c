package tokencmd

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/inspect"
	"github.com/signagent/signagent/pkcs11/locate"
	"github.com/signagent/signagent/pkcs11/probe"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

func listCommand(e *cmdutil.Env) *cli.Command {
	return &cli.Command{
		Description: cmdutil.Examples("signagent token list", "signagent token list --module /usr/lib/librtpkcs11ecp.so"),
		Name:        "list",
		Usage:       "list the tokens the PKCS#11 module sees",
		Flags: []cli.Flag{
			cmdutil.Pick(cmdutil.TokenFlags(), "module")[0],
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error { return runList(c.Context, e, readList(c)) },
	}
}

// listOptions are what list and keys are told: the module (--module,
// else the default one), for keys the token and the PIN's sources, and
// the form of the listing.
type listOptions struct {
	Module string
	Token  tokeninfo.TokenSelector
	PIN    secret.Source
	JSON   bool
}

// readList reads list's flags.
func readList(c *cli.Context) listOptions {
	return listOptions{Module: c.String("module"), JSON: c.Bool("json")}
}

// runList lists the tokens the module sees.
func runList(ctx context.Context, e *cmdutil.Env, o listOptions) error {
	mod, err := probedModule(ctx, e, o.Module)
	if err != nil {
		return err
	}
	tokens, err := pkcs11.ListTokens(context.Background(), mod.Path)
	if err != nil {
		return err
	}
	if o.JSON {
		return cmdutil.WriteJSON(e, map[string]any{"module": mod.Path, "tokens": cmdutil.NonNil(tokens)})
	}
	fmt.Fprintf(e.Stdout, "module: %s (%s)\n", mod.Path, mod.Source)
	return inspect.WriteTokenTable(e.Stdout, tokens)
}

func keysCommand(e *cmdutil.Env) *cli.Command {
	return &cli.Command{
		Description: cmdutil.Examples("signagent token keys --token-label partner --pin-file pin --json"),
		Name:        "keys",
		Usage:       "list the keys and certificates on a token (private keys only with a PIN)",
		Flags:       append(cmdutil.Pick(cmdutil.TokenFlags(), "module", "token-label", "token-serial", "pin-file"), &cli.BoolFlag{Name: "json", Usage: "print JSON"}),
		Action:      func(c *cli.Context) error { return runKeys(c.Context, e, readKeys(c)) },
	}
}

// readKeys reads keys' flags; the PIN is read from its sources when the
// module is found.
func readKeys(c *cli.Context) listOptions {
	o := readList(c)
	o.Token = tokeninfo.TokenSelector{Label: c.String("token-label"), Serial: c.String("token-serial")}
	o.PIN = cmdutil.PINSource(settings.Of(c), true, o.Token.Label)
	return o
}

// runKeys lists the token's objects (private keys only with a PIN).
func runKeys(ctx context.Context, e *cmdutil.Env, o listOptions) error {
	mod, err := probedModule(ctx, e, o.Module)
	if err != nil {
		return err
	}
	src := o.PIN
	got, err := src.Resolve()
	if errors.Is(err, secret.ErrMissing) && !src.Given() {
		e.Log.Warn().Msg("no PIN given: listing public objects only (set SIGNAGENT_PIN or give --pin-file to see private keys)")
		err = nil
	}
	if err != nil {
		return errdefs.Mark(err, tokenerr.ErrPINMissing)
	}
	pin := got.Value
	objs, err := inspect.ListObjects(context.Background(), mod.Path, o.Token, pin)
	if err != nil {
		return err
	}
	if o.JSON {
		return cmdutil.WriteJSON(e, map[string]any{"objects": objectsJSON(objs)})
	}
	return inspect.WriteObjectTable(e.Stdout, objs)
}

// resolveModuleFrom finds the module named (--module), else the first of
// candidates, and says which it is when the operator named none.
func resolveModuleFrom(e *cmdutil.Env, named string, candidates []string) (pkcs11.Module, error) {
	mod, err := locate.ResolveFrom(named, "flag", candidates)
	if err != nil {
		return mod, err
	}
	if mod.Source == "default location" {
		e.Log.Info().Str("module", mod.Path).Msg("using PKCS#11 module")
	}
	return mod, nil
}

// probedModule is the module named (else the default one), tried in a
// child process.
func probedModule(ctx context.Context, e *cmdutil.Env, named string) (pkcs11.Module, error) {
	mod, err := resolveModuleFrom(e, named, locate.DefaultModules)
	if err == nil {
		err = probe.Module(ctx, mod.Path)
	}
	return mod, err
}

// objectJSON is an object as --json prints it: its certificate's end in
// the one time format of signagent's JSON (cmdutil.JSONTime).
type objectJSON struct {
	inspect.Object
	NotAfter string `json:"notAfter,omitempty"`
}

func objectsJSON(objs []inspect.Object) []objectJSON {
	out := make([]objectJSON, 0, len(objs))
	for _, o := range objs {
		j := objectJSON{Object: o}
		if !o.NotAfter.IsZero() {
			j.NotAfter = cmdutil.JSONTime(o.NotAfter)
		}
		out = append(out, j)
	}
	return out
}
