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
		Action: cmdutil.Run(f, readSign, runSign),
	}
}

// signOptions are what sign is told: the signed text's credential and
// timestamp, where the signature (and the text) go and in what form,
// and the flags that choose a signature here, given by hand (the agent
// signs with its own settings: they are refused when it signs).
type signOptions struct {
	Text    textOptions
	Format  string
	Out     string
	TextOut string
	JSON    bool
	// SignedHere are the flags among --hash, --no-signed-attributes,
	// --chain, --key, --key-label and --key-id given on the command line
	// or in the environment (not by the settings file).
	SignedHere []string
	// Needs are the settings signing here needs (the API key).
	Needs []cmdutil.Need
}

// readSign reads sign's flags.
func readSign(c *cli.Context) (signOptions, error) {
	o := signOptions{Format: c.String("format"), Out: c.String("out"), TextOut: c.String("text-out"), JSON: c.Bool("json"),
		Needs: []cmdutil.Need{cmdutil.APIKeySpec.Need(settings.Of(c))}}
	if _, err := signer.Encode(nil, o.Format); err != nil {
		return o, cmdutil.UsageErr(fmt.Errorf("--%w", err))
	}
	for _, name := range []string{"hash", "no-signed-attributes", "chain", "key", "key-label", "key-id"} {
		if c.IsSet(name) && !cmdutil.FromFile(c.App)[name] {
			o.SignedHere = append(o.SignedHere, name)
		}
	}
	var err error
	o.Text, err = readText(c)
	return o, err
}

// runSign signs the text: through the running agent when one is asked,
// else on the token here.
func runSign(ctx context.Context, f *factory.Factory, o signOptions) error {
	e := f.Env
	// DER is binary: written to a terminal it garbles the screen, as age
	// refuses to. Checked before the token is touched.
	if o.Format == "der" && o.Out == "" && !o.JSON && cmdutil.IsTerminal(e.Stdout) {
		return cmdutil.UsageErr(errors.New("the signature is binary (DER) and stdout is a terminal: give --out FILE, or --format base64 or pem"))
	}
	// The outputs are checked before the token is touched, and written
	// together at the end (both or neither).
	outs, err := checkOutputs(map[string]string{"text-out": o.TextOut, "out": o.Out}, "text-out", "out")
	if err != nil {
		return err
	}
	if cl, err := f.Agent(); err != nil || cl != nil {
		if err != nil {
			return err
		}
		return signWithAgent(ctx, e, cl, o, outs)
	}
	if err := cmdutil.Missing(o.Needs...); err != nil {
		return err
	}
	text, err := o.Text.text(f.Settings())
	if err != nil {
		return err
	}
	cred, stamp := o.Text.Cred, canonical.FormatTimestamp(o.Text.TS)
	ts, _ := canonical.ParseTimestamp(stamp)
	sel, err := f.Selection()
	if err != nil {
		return err
	}
	// --token-timeout bounds all the token work: loading the module,
	// logging in, finding the key and signing.
	ctx, cancel := context.WithTimeout(ctx, sel.Timeout)
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
	out, err := signatureOutput(o, canonical.ThumbprintOf(key.Certificate()), key.Label(), text, stamp, der)
	if err != nil {
		return err
	}
	return writeSignature(e, o, outs, text, out)
}

// writeSignature writes the outputs together (both or neither), or the
// signature to stdout.
func writeSignature(e *cmdutil.Env, o signOptions, outs []*safefile.Out, text, out []byte) error {
	var data [][]byte
	if o.TextOut != "" {
		data = append(data, text)
	}
	if o.Out != "" {
		data = append(data, out)
	}
	if err := safefile.WriteAll(outs, data); err != nil {
		return err
	}
	if o.Out == "" {
		_, err := e.Stdout.Write(out)
		return err
	}
	return nil
}

// signWithAgent asks the running agent for the signature: the agent's
// token, key and signing settings, so the flags that would choose others
// here are refused rather than ignored.
func signWithAgent(ctx context.Context, e *cmdutil.Env, cl *agentclient.Client, o signOptions, outs []*safefile.Out) error {
	if len(o.SignedHere) > 0 {
		return cmdutil.UsageErr(fmt.Errorf("--%s: the agent signs with its own key and settings; give --no-agent to sign here", o.SignedHere[0]))
	}
	cred := o.Text.Cred
	stamp := canonical.FormatTimestamp(o.Text.TS)
	resp, err := cl.Sign(ctx, agentapi.SignatureRequest{Credential: *cmdutil.APICredential(cred), Timestamp: stamp})
	if err != nil {
		return factory.AgentCallError(err)
	}
	der, err := base64.StdEncoding.DecodeString(resp.Signature)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("the agent's signature is not base64: %w", err), errdefs.ErrUnreachable)
	}
	text := []byte(resp.Canonical)
	if o.TextOut != "" && len(text) == 0 {
		return cmdutil.UsageErr(errors.New("--text-out: the agent does not show the signed text (it holds the API key; serve --expose-canonical shows it); give --no-agent to sign here"))
	}
	e.Log.Info().Str("credential", cred.Masked()).Str("timestamp", resp.Timestamp).Str("certificate", resp.CertificateThumbprint).Msg("signed by the agent")
	out, err := signatureOutput(o, resp.CertificateThumbprint, "", text, resp.Timestamp, der)
	if err != nil {
		return err
	}
	return writeSignature(e, o, outs, text, out)
}

// checkOutputs checks the output files paths gives the flags named, in
// order.
func checkOutputs(paths map[string]string, flags ...string) ([]*safefile.Out, error) {
	var outs []*safefile.Out
	for _, name := range flags {
		if path := paths[name]; path != "" {
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
func signatureOutput(o signOptions, thumbprint, label string, text []byte, stamp string, der []byte) ([]byte, error) {
	if !o.JSON {
		return signer.Encode(der, o.Format)
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
