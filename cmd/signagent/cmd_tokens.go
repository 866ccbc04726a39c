package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/internal/settings"
	"github.com/signagent/signagent/pkcs11"
)

func tokensCommand(e *env) *cli.Command {
	return &cli.Command{
		Description: examples("signagent tokens", "signagent tokens --module /usr/lib/librtpkcs11ecp.so"),
		Name:        "tokens",
		Usage:       "list the tokens the PKCS#11 module sees",
		Flags: []cli.Flag{
			pick(tokenFlags(), "module")[0],
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			mod, err := probedModule(c, e)
			if err != nil {
				return err
			}
			tokens, err := pkcs11.ListTokens(context.Background(), mod.Path)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(e, map[string]any{"module": mod.Path, "tokens": nonNil(tokens)})
			}
			fmt.Fprintf(e.stdout, "module: %s (%s)\n", mod.Path, mod.Source)
			return pkcs11.WriteTokenTable(e.stdout, tokens)
		},
	}
}

func keysCommand(e *env) *cli.Command {
	return &cli.Command{
		Description: examples("signagent keys --token-label partner --pin-file pin --json"),
		Name:        "keys",
		Usage:       "list the keys and certificates on a token (private keys only with a PIN)",
		Flags:       append(pick(tokenFlags(), "module", "token-label", "token-serial", "pin-file"), &cli.BoolFlag{Name: "json", Usage: "print JSON"}),
		Action: func(c *cli.Context) error {
			mod, err := probedModule(c, e)
			if err != nil {
				return err
			}
			src := pinSource(settings.Of(c), true, c.String("token-label"))
			got, err := src.Resolve()
			if errors.Is(err, secret.ErrMissing) && !src.Given() {
				e.log.Warn().Msg("no PIN given: listing public objects only (set SIGNAGENT_PIN or give --pin-file to see private keys)")
				err = nil
			}
			if err != nil {
				return errdefs.Mark(err, pkcs11.ErrPINMissing)
			}
			pin := got.Value
			objs, err := pkcs11.ListObjects(context.Background(), mod.Path, pkcs11.TokenSelector{Label: c.String("token-label"), Serial: c.String("token-serial")}, pin)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(e, map[string]any{"objects": nonNil(objs)})
			}
			return pkcs11.WriteObjectTable(e.stdout, objs)
		},
	}
}

// resolveModule finds the module --module names (or the default one) and
// says which it is when the operator named none.
func resolveModule(c *cli.Context, e *env) (pkcs11.Module, error) {
	return resolveModuleFrom(c, e, pkcs11.DefaultModules)
}

// resolveModuleFrom is resolveModule looking in candidates when no module
// is named.
func resolveModuleFrom(c *cli.Context, e *env, candidates []string) (pkcs11.Module, error) {
	mod, err := pkcs11.ResolveModuleFrom(c.String("module"), "flag", candidates)
	if err != nil {
		return mod, err
	}
	if mod.Source == "default location" {
		e.log.Info().Str("module", mod.Path).Msg("using PKCS#11 module")
	}
	return mod, nil
}

// probedModule is resolveModule, then the module tried in a child process.
func probedModule(c *cli.Context, e *env) (pkcs11.Module, error) {
	mod, err := resolveModule(c, e)
	if err == nil {
		err = pkcs11.Probe(c.Context, mod.Path)
	}
	return mod, err
}

func writeJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
