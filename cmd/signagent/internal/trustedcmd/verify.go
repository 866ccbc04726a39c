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
		Action: func(c *cli.Context) error {
			raw, err := safefile.Read(c.String("signature"), 1<<20)
			if err != nil {
				return cmdutil.UsageErr(err)
			}
			der, err := signer.Decode(raw)
			if err != nil {
				return cmdutil.UsageErr(fmt.Errorf("%s: %w", c.String("signature"), err))
			}
			content, err := safefile.Read(c.String("content"), 64<<20)
			if err != nil {
				return cmdutil.UsageErr(err)
			}
			var cas []*x509.Certificate
			if f := c.String("ca"); f != "" {
				if cas, err = cmdutil.ReadCerts(f); err != nil {
					return err
				}
			}
			roots := len(cas) > 0
			v, err := signer.VerifyCerts(der, content, cas)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				out := map[string]any{"valid": true, "signer": v.Signer.Subject.String(), "thumbprint": canonical.ThumbprintOf(v.Signer),
					"signedAttributes": v.SignedAttributes, "chain": map[bool]string{true: "trusted", false: "not checked"}[roots]}
				if !v.SigningTime.IsZero() {
					out["signingTime"] = cmdutil.JSONTime(v.SigningTime)
				}
				return cmdutil.WriteJSON(e, out)
			}
			return v.Report(e.Stdout, roots)
		},
	}
}
