package factory

import (
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/trusted"
)

// TrustedConfig is the trusted service's settings, with apiKey.
func (f *Factory) TrustedConfig(apiKey string) (*trusted.Config, error) {
	return trustedConfig(f.Settings(), f.Env, apiKey)
}

// trustedConfig is the trusted service's settings in s, with apiKey.
func trustedConfig(s *settings.Settings, e *cmdutil.Env, apiKey string) (*trusted.Config, error) {
	svc := cmdutil.ReadService(s)
	if svc.TrustedURL == "" {
		return nil, cmdutil.UsageErr(errors.New("give the service's address with --trusted-url or SIGNAGENT_TRUSTED_URL"))
	}
	if svc.Attempts < 1 {
		return nil, cmdutil.UsageErr(errors.New("--attempts must be at least 1"))
	}
	return &trusted.Config{BaseURL: svc.TrustedURL, AllowInsecureHTTP: svc.InsecureHTTP, APIKey: apiKey,
		Settings: httpx.Settings{Timeout: svc.RequestTimeout, Attempts: svc.Attempts, UserAgent: "signagent/" + cmdutil.Version}, Log: e.Log}, s.Err()
}

// SignFlags shape the CMS signature: its digest, signed attributes and
// chain.
func SignFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "hash", Value: "sha256", Category: cmdutil.CatOutput, Usage: "digest `HASH`: sha256, sha384 or sha512"},
		&cli.BoolFlag{Name: "no-signed-attributes", Category: cmdutil.CatOutput, Usage: "sign the content digest directly, with no signed attributes (certified-provider style)"},
		&cli.StringFlag{Name: "chain", Category: cmdutil.CatOutput, Usage: "PEM `FILE` of intermediate certificates to include"},
	}
}
