package trustedcmd

import (
	"crypto/x509"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/safefile"
	"github.com/signagent/signagent/signer"
)

func verifyCommand(e *cmdutil.Env) *cli.Command {
	return &cli.Command{
		Description: cmdutil.Examples("signagent trusted verify --signature sig.der --content text", "signagent trusted verify --signature sig.der --content text --ca ca.pem --json"),
		Name:        "verify",
		Usage:       "check a detached CMS signature over a content file",
		UsageText:   "signagent trusted verify --signature FILE --content FILE [--ca FILE]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "signature", Required: true, Usage: "signature `FILE`: DER, PEM or base64"},
			&cli.StringFlag{Name: "content", Required: true, Usage: "the signed `FILE`"},
			&cli.StringFlag{Name: "ca", Usage: "PEM `FILE` of trusted certificates the signer must chain to"},
			cmdutil.JSONFlag(`{"valid","signer","thumbprint","signingTime","signedAttributes","chain"}`),
		},
		Action: func(c *cli.Context) error { return runVerify(e, readVerify(c)) },
	}
}

// verifyOptions are what verify is told: the signature's and the
// content's files, and the CA file the signer must chain to ("": none).
type verifyOptions struct {
	Signature, Content, CA string
	JSON                   bool
}

// readVerify reads verify's flags.
func readVerify(c *cli.Context) verifyOptions {
	return verifyOptions{Signature: c.String("signature"), Content: c.String("content"), CA: c.String("ca"), JSON: c.Bool("json")}
}

// runVerify checks the signature over the content and reports it.
func runVerify(e *cmdutil.Env, o verifyOptions) error {
	raw, err := safefile.Read(o.Signature, 1<<20)
	if err != nil {
		return cmdutil.UsageErr(err)
	}
	der, err := signer.Decode(raw)
	if err != nil {
		return cmdutil.UsageErr(fmt.Errorf("%s: %w", o.Signature, err))
	}
	content, err := safefile.Read(o.Content, 64<<20)
	if err != nil {
		return cmdutil.UsageErr(err)
	}
	var cas []*x509.Certificate
	if o.CA != "" {
		if cas, err = cmdutil.ReadCerts(o.CA); err != nil {
			return err
		}
	}
	roots := len(cas) > 0
	v, err := signer.VerifyCerts(der, content, cas)
	if err != nil {
		return err
	}
	if o.JSON {
		out := map[string]any{"valid": true, "signer": v.Signer.Subject.String(), "thumbprint": canonical.ThumbprintOf(v.Signer),
			"signedAttributes": v.SignedAttributes, "chain": map[bool]string{true: "trusted", false: "not checked"}[roots]}
		if !v.SigningTime.IsZero() {
			out["signingTime"] = cmdutil.JSONTime(v.SigningTime)
		}
		return cmdutil.WriteJSON(e, out)
	}
	return v.Report(e.Stdout, roots)
}
