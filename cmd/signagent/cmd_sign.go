package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/safefile"
	"github.com/signagent/signagent/signer"
)

func canonicalCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "canonical",
		Usage:     "write the exact text that is signed for a credential (it contains the API key: treat it as secret)",
		UsageText: "signagent canonical --phone P | --snils S | --thumbprint T [--timestamp \"dd.MM.yyyy HH:mm:ss\"]",
		Flags:     append(credentialFlags(), apiKeyFlags()...),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			text, _, _, err := buildText(c)
			if err != nil {
				return err
			}
			_, err = e.stdout.Write(text)
			return err
		},
	}
}

func buildText(c *cli.Context) ([]byte, canonical.Credential, string, error) {
	cred, err := credential(c)
	if err != nil {
		return nil, cred, "", err
	}
	ts, err := timestamp(c)
	if err != nil {
		return nil, cred, "", err
	}
	key, err := apiKey(c)
	if err != nil {
		return nil, cred, "", err
	}
	return canonical.Text(key, cred, ts), cred, canonical.FormatTimestamp(ts), nil
}

func signFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "hash", Value: "sha256", Category: catOutput, Usage: "digest: sha256, sha384 or sha512"},
		&cli.BoolFlag{Name: "no-signed-attributes", Category: catOutput, Usage: "sign the content digest directly, with no signed attributes (certified-provider style)"},
		&cli.StringFlag{Name: "chain", Category: catOutput, Usage: "PEM `FILE` of intermediate certificates to include"},
	}
}

// openKey asks for the PIN first (a prompt is not bounded by the token's
// deadline), then opens the key within ctx's deadline, or --token-timeout
// when ctx has none.
func openKey(ctx context.Context, sel pkcs11.Selection, e *env) (*pkcs11.Key, error) {
	var err error
	if sel.PIN, err = sel.PIN.Resolve(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sel.Timeout)
		defer cancel()
	}
	if err := probe(ctx, sel); err != nil {
		return nil, err
	}
	return pkcs11.Open(ctx, sel, e.log)
}

// probe tries the selected module in a child process first, so that a
// module that crashes while initializing is reported in one line.
func probe(ctx context.Context, sel pkcs11.Selection) error {
	path := sel.Module
	if u, err := pkcs11.ParseURI(sel.URI); err == nil && u.ModulePath != "" && path == "" {
		path = u.ModulePath
	}
	mod, err := pkcs11.ResolveModule(path, "flag")
	if err != nil {
		return err
	}
	return pkcs11.Probe(ctx, mod.Path)
}

// openSigner opens the key the flags select and returns a CMS signer over
// it, within ctx.
func openSigner(ctx context.Context, c *cli.Context, e *env, sel pkcs11.Selection) (*pkcs11.Key, *signer.CMS, error) {
	h, err := signer.HashFromName(c.String("hash"))
	if err != nil {
		return nil, nil, err
	}
	opts := signer.Options{Hash: h, NoSignedAttributes: c.Bool("no-signed-attributes")}
	if f := c.String("chain"); f != "" {
		if opts.Chain, err = readCerts(f); err != nil {
			return nil, nil, err
		}
	}
	key, err := openKey(ctx, sel, e)
	if err != nil {
		return nil, nil, err
	}
	return key, &signer.CMS{Key: key, Cert: key.Certificate(), Options: opts}, nil
}

func signCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "sign",
		Usage:     "sign the text for a credential on the token: a detached CMS SignedData",
		UsageText: "signagent sign --phone P | --snils S | --thumbprint T [--timestamp T] [--out FILE] [--format der|pem|base64] [--json]",
		Flags: concat(credentialFlags(), apiKeyFlags(), tokenFlags(), signFlags(), []cli.Flag{
			&cli.StringFlag{Name: "out", Category: catOutput, Usage: "write the signature to `FILE` (atomically) instead of stdout"},
			&cli.StringFlag{Name: "text-out", Category: catOutput, Usage: "also write the signed text to `FILE` (mode 0600: it holds the API key)"},
			&cli.StringFlag{Name: "format", Value: "der", Category: catOutput, Usage: "der, pem or base64"},
			&cli.BoolFlag{Name: "json", Category: catOutput, Usage: "print timestamp, canonical text, base64 signature, certificate thumbprint and key label as JSON"},
		}),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			format := c.String("format")
			if format != "der" && format != "pem" && format != "base64" {
				return usageErr(fmt.Errorf("--format %q: want der, pem or base64", format))
			}
			// The outputs are checked before the token is touched, and
			// written together at the end (both or neither).
			var outs []*safefile.Out
			for _, name := range []string{"text-out", "out"} {
				if path := c.String(name); path != "" {
					o, err := safefile.Check(path, 0o600)
					if err != nil {
						return usageErr(fmt.Errorf("--%s: %w", name, err))
					}
					outs = append(outs, o)
				}
			}
			text, cred, stamp, err := buildText(c)
			if err != nil {
				return err
			}
			ts, _ := canonical.ParseTimestamp(stamp)
			sel, err := selection(c)
			if err != nil {
				return err
			}
			if sel.PIN, err = sel.PIN.Resolve(); err != nil {
				return err
			}
			// --token-timeout bounds all the token work: loading the
			// module, logging in, finding the key and signing.
			ctx, cancel := context.WithTimeout(c.Context, sel.Timeout)
			defer cancel()
			key, cms, err := openSigner(ctx, c, e, sel)
			if err != nil {
				return err
			}
			defer key.Close()
			der, err := cms.SignText(ctx, text, ts)
			if err != nil {
				return err
			}
			e.log.Info().Str("credential", cred.Masked()).Str("timestamp", stamp).Str("key", key.Label()).
				Str("certificate", pkcs11.Thumbprint(key.Certificate())).Msg("signed")
			var out []byte
			if c.Bool("json") {
				out, err = json.MarshalIndent(map[string]string{
					"timestamp":             stamp,
					"canonical":             string(text),
					"signature":             base64.StdEncoding.EncodeToString(der),
					"certificateThumbprint": pkcs11.Thumbprint(key.Certificate()),
					"keyLabel":              key.Label(),
				}, "", "  ")
				if err != nil {
					return err
				}
				out = append(out, '\n')
			} else {
				out = encodeSignature(der, format)
			}
			var data [][]byte
			if c.String("text-out") != "" {
				data = append(data, text)
			}
			if c.String("out") != "" {
				data = append(data, out)
			}
			if err := safefile.WriteAll(outs, data); err != nil {
				return err
			}
			if c.String("out") == "" {
				_, err = e.stdout.Write(out)
			}
			return err
		},
	}
}

func encodeSignature(der []byte, format string) []byte {
	switch format {
	case "pem":
		return pem.EncodeToMemory(&pem.Block{Type: "CMS", Bytes: der})
	case "base64":
		return []byte(base64.StdEncoding.EncodeToString(der) + "\n")
	}
	return der
}

// decodeSignature accepts DER, PEM (CMS or PKCS7) or base64.
func decodeSignature(b []byte) ([]byte, error) {
	if len(b) > 0 && b[0] == 0x30 {
		return b, nil
	}
	if blk, _ := pem.Decode(b); blk != nil {
		return blk.Bytes, nil
	}
	der, err := base64.StdEncoding.DecodeString(string(trimSpace(b)))
	if err != nil {
		return nil, errors.New("the signature file is neither DER, PEM nor base64")
	}
	return der, nil
}

func trimSpace(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c != ' ' && c != '\n' && c != '\r' && c != '\t' {
			out = append(out, c)
		}
	}
	return out
}

func concat(sets ...[]cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, s := range sets {
		out = append(out, s...)
	}
	return out
}
