package trustedcmd

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/safefile"
	"github.com/signagent/signagent/signer"
)

func canonicalCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Description: cmdutil.Examples("signagent trusted canonical --phone 9161234567 | od -c | head"),
		Name:        "canonical",
		Usage:       "write the exact text that is signed for a credential (it contains the API key: treat it as secret)",
		UsageText:   "signagent trusted canonical --phone P | --snils S | --thumbprint T [--timestamp \"dd.MM.yyyy HH:mm:ss\"]",
		Flags:       append(cmdutil.CredentialFlags(), cmdutil.APIKeyFlags()...),
		Action: func(c *cli.Context) error {
			o, err := readText(c)
			if err != nil {
				return err
			}
			text, err := o.text(f.Settings())
			if err != nil {
				return err
			}
			_, err = f.Stdout.Write(text)
			return err
		},
	}
}

// textOptions name the signed text: the user's credential and its
// timestamp (--timestamp, else now).
type textOptions struct {
	Cred canonical.Credential
	TS   time.Time
}

// readText reads the credential flags.
func readText(c *cli.Context) (textOptions, error) {
	cred, err := cmdutil.Credential(c)
	if err != nil {
		return textOptions{}, err
	}
	ts, err := cmdutil.Timestamp(c)
	return textOptions{Cred: cred, TS: ts}, err
}

// text is the signed text, with the API key from its sources in s.
func (o textOptions) text(s *settings.Settings) ([]byte, error) {
	key, err := cmdutil.APIKeyFrom(s)
	if err != nil {
		return nil, err
	}
	return canonical.Text(key, o.Cred, o.TS), nil
}

// buildText is the signed text the flags name, its credential and its
// timestamp as the service spells it.
func buildText(c *cli.Context) ([]byte, canonical.Credential, string, error) {
	o, err := readText(c)
	if err != nil {
		return nil, o.Cred, "", err
	}
	text, err := o.text(settings.Of(c))
	if err != nil {
		return nil, o.Cred, "", err
	}
	return text, o.Cred, canonical.FormatTimestamp(o.TS), nil
}

func signCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Description: cmdutil.Examples("signagent trusted sign --phone 9161234567 --out sig.der", "signagent trusted sign --snils 11223344595 --format base64", "signagent trusted sign --phone 9161234567 --json"),
		Name:        "sign",
		Usage:       "sign the text for a credential on the token: a detached CMS SignedData",
		UsageText:   "signagent trusted sign --phone P | --snils S | --thumbprint T [--timestamp T] [--out FILE] [--format der|pem|base64] [--json]",
		Flags: cmdutil.Concat(cmdutil.CredentialFlags(), cmdutil.APIKeyFlags(), cmdutil.TokenFlags(), factory.SignFlags(), []cli.Flag{
			&cli.StringFlag{Name: "out", Category: cmdutil.CatOutput, Usage: "write the signature to `FILE` (atomically) instead of stdout"},
			&cli.StringFlag{Name: "text-out", Category: cmdutil.CatOutput, Usage: "also write the signed text to `FILE` (mode 0600: it holds the API key)"},
			&cli.StringFlag{Name: "format", Value: "der", Category: cmdutil.CatOutput, Usage: "output `FORMAT`: der, pem or base64"},
			&cli.BoolFlag{Name: "json", Category: cmdutil.CatOutput, Usage: "print timestamp, canonical text, base64 signature, certificate thumbprint and key label as JSON"},
		}, factory.AgentUseFlags()),
		Action: func(c *cli.Context) error {
			return sign(c, f)
		},
	}
}

func sign(c *cli.Context, f *factory.Factory) error {
	e := f.Env
	if _, err := signer.Encode(nil, c.String("format")); err != nil {
		return cmdutil.UsageErr(fmt.Errorf("--%w", err))
	}
	// DER is binary: written to a terminal it garbles the screen, as age
	// refuses to. Checked before the token is touched.
	if c.String("format") == "der" && c.String("out") == "" && !c.Bool("json") && cmdutil.IsTerminal(e.Stdout) {
		return cmdutil.UsageErr(errors.New("the signature is binary (DER) and stdout is a terminal: give --out FILE, or --format base64 or pem"))
	}
	// The outputs are checked before the token is touched, and written
	// together at the end (both or neither).
	outs, err := checkOutputs(c, "text-out", "out")
	if err != nil {
		return err
	}
	if cl, err := f.Agent(); err != nil || cl != nil {
		if err != nil {
			return err
		}
		return signWithAgent(c, e, cl, outs)
	}
	if err := cmdutil.Missing(cmdutil.APIKeySpec.Need(settings.Of(c))); err != nil {
		return err
	}
	text, cred, stamp, err := buildText(c)
	if err != nil {
		return err
	}
	ts, _ := canonical.ParseTimestamp(stamp)
	sel, err := f.Selection()
	if err != nil {
		return err
	}
	// --token-timeout bounds all the token work: loading the module,
	// logging in, finding the key and signing.
	ctx, cancel := context.WithTimeout(c.Context, sel.Timeout)
	defer cancel()
	cms, err := f.CMS(ctx)
	if err != nil {
		return err
	}
	key, _ := f.Key(ctx) // opened for cms
	if err := signer.CheckValidity(key.Certificate(), ts); err != nil {
		e.Log.Warn().Err(err).Msg("signing anyway: the service will refuse this signature")
	}
	der, err := cms.SignText(ctx, text, ts)
	if err != nil {
		return err
	}
	e.Log.Info().Str("credential", cred.Masked()).Str("timestamp", stamp).Str("key", key.Label()).
		Str("certificate", canonical.ThumbprintOf(key.Certificate())).Msg("signed")
	out, err := signatureOutput(c, canonical.ThumbprintOf(key.Certificate()), key.Label(), text, stamp, der)
	if err != nil {
		return err
	}
	return writeSignature(c, e, outs, text, out)
}

// writeSignature writes the outputs together (both or neither), or the
// signature to stdout.
func writeSignature(c *cli.Context, e *cmdutil.Env, outs []*safefile.Out, text, out []byte) error {
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
		_, err := e.Stdout.Write(out)
		return err
	}
	return nil
}

// signWithAgent asks the running agent for the signature: the agent's
// token, key and signing settings, so the flags that would choose others
// here are refused rather than ignored.
func signWithAgent(c *cli.Context, e *cmdutil.Env, cl *agentclient.Client, outs []*safefile.Out) error {
	for _, name := range []string{"hash", "no-signed-attributes", "chain", "key", "key-label", "key-id"} {
		if c.IsSet(name) && !cmdutil.FromFile(c.App)[name] {
			return cmdutil.UsageErr(fmt.Errorf("--%s: the agent signs with its own key and settings; give --no-agent to sign here", name))
		}
	}
	cred, err := cmdutil.Credential(c)
	if err != nil {
		return err
	}
	ts, err := cmdutil.Timestamp(c)
	if err != nil {
		return err
	}
	stamp := canonical.FormatTimestamp(ts)
	resp, err := cl.Sign(c.Context, agentapi.SignatureRequest{Credential: *cmdutil.APICredential(cred), Timestamp: stamp})
	if err != nil {
		return factory.AgentCallError(err)
	}
	der, err := base64.StdEncoding.DecodeString(resp.Signature)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("the agent's signature is not base64: %w", err), errdefs.ErrUnreachable)
	}
	text := []byte(resp.Canonical)
	if c.String("text-out") != "" && len(text) == 0 {
		return cmdutil.UsageErr(errors.New("--text-out: the agent does not show the signed text (it holds the API key; serve --expose-canonical shows it); give --no-agent to sign here"))
	}
	e.Log.Info().Str("credential", cred.Masked()).Str("timestamp", resp.Timestamp).Str("certificate", resp.CertificateThumbprint).Msg("signed by the agent")
	out, err := signatureOutput(c, resp.CertificateThumbprint, "", text, resp.Timestamp, der)
	if err != nil {
		return err
	}
	return writeSignature(c, e, outs, text, out)
}

// checkOutputs checks the output files the flags name, in order.
func checkOutputs(c *cli.Context, flags ...string) ([]*safefile.Out, error) {
	var outs []*safefile.Out
	for _, name := range flags {
		if path := c.String(name); path != "" {
			o, err := safefile.Check(path, 0o600)
			if err != nil {
				return nil, cmdutil.UsageErr(fmt.Errorf("--%s: %w", name, err))
			}
			outs = append(outs, o)
		}
	}
	return outs, nil
}

// signatureOutput is the signature in --format, or the --json document.
// Through the agent, the key's label is not known and the text only when
// the agent shows it: those keys are left out.
func signatureOutput(c *cli.Context, thumbprint, label string, text []byte, stamp string, der []byte) ([]byte, error) {
	if !c.Bool("json") {
		return signer.Encode(der, c.String("format"))
	}
	doc := map[string]string{
		"timestamp":             stamp,
		"signature":             base64.StdEncoding.EncodeToString(der),
		"certificateThumbprint": thumbprint,
	}
	if len(text) > 0 {
		doc["canonical"] = string(text)
	}
	if label != "" {
		doc["keyLabel"] = label
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	return append(out, '\n'), err
}
