package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/pkcs11"
)

func tokensCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "tokens",
		Usage: "list the tokens the PKCS#11 module sees",
		Flags: []cli.Flag{
			tokenFlags()[0], // --module
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			mod, err := resolveModule(c, e)
			if err == nil {
				err = pkcs11.Probe(c.Context, mod.Path)
			}
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
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SLOT\tLABEL\tSERIAL\tMANUFACTURER\tMODEL\tFLAGS")
			for _, t := range tokens {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.Slot, t.Label, t.Serial, t.Manufacturer, t.Model, strings.Join(t.Flags, ","))
			}
			return tw.Flush()
		},
	}
}

func keysCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "keys",
		Usage: "list the keys and certificates on a token (private keys only with a PIN)",
		Flags: append(tokenFlags()[:3], tokenFlags()[7], &cli.BoolFlag{Name: "json", Usage: "print JSON"}),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			mod, err := resolveModule(c, e)
			if err == nil {
				err = pkcs11.Probe(c.Context, mod.Path)
			}
			if err != nil {
				return err
			}
			pin, err := pkcs11.ReadPIN(pkcs11.PINSource{File: c.String("pin-file"), Prompt: true})
			if errors.Is(err, pkcs11.ErrPINMissing) && c.String("pin-file") == "" {
				e.log.Info().Msg("no PIN given: listing public objects only (set SIGNAGENT_PIN or --pin-file to see private keys)")
				pin, err = "", nil
			}
			if err != nil {
				return err
			}
			objs, err := pkcs11.ListObjects(context.Background(), mod.Path, pkcs11.TokenSelector{Label: c.String("token-label"), Serial: c.String("token-serial")}, pin)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(e, map[string]any{"objects": nonNil(objs)})
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CLASS\tLABEL\tID\tTYPE\tSIZE\tKEPT\tSUBJECT\tISSUER\tNOT AFTER\tTHUMBPRINT")
			for _, o := range objs {
				size := ""
				if o.Bits > 0 {
					size = fmt.Sprint(o.Bits)
				}
				if o.Curve != "" {
					size = o.Curve
				}
				notAfter := ""
				if !o.NotAfter.IsZero() {
					notAfter = o.NotAfter.Format("2006-01-02")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Class, o.Label, o.ID, o.KeyType, size, kept(o), o.Subject, o.Issuer, notAfter, o.Thumbprint)
			}
			return tw.Flush()
		},
	}
}

// kept says how a private key is held: "on-token" when it is sensitive and
// not extractable, "EXTRACTABLE" when the token would let it out.
func kept(o pkcs11.Object) string {
	switch {
	case o.Extractable != nil && *o.Extractable:
		return "EXTRACTABLE"
	case o.Sensitive != nil && *o.Sensitive:
		return "on-token"
	}
	return ""
}

// resolveModule finds the module --module names (or the default one) and
// says which it is when the operator named none.
func resolveModule(c *cli.Context, e *env) (pkcs11.Module, error) {
	mod, err := pkcs11.ResolveModule(c.String("module"), "flag")
	if err != nil {
		return mod, err
	}
	if mod.Source == "default location" {
		e.log.Info().Str("module", mod.Path).Msg("using PKCS#11 module")
	}
	return mod, nil
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
