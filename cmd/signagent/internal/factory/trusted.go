package factory

import (
	"errors"
	"time"

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
	if s.String("trusted-url") == "" {
		return nil, cmdutil.UsageErr(errors.New("give the service's address with --trusted-url or SIGNAGENT_TRUSTED_URL"))
	}
	if s.Int("attempts") < 1 {
		return nil, cmdutil.UsageErr(errors.New("--attempts must be at least 1"))
	}
	return &trusted.Config{BaseURL: s.String("trusted-url"), AllowInsecureHTTP: s.Bool("insecure-http"), APIKey: apiKey,
		Settings: httpx.Settings{Timeout: s.Duration("request-timeout"), Attempts: s.Int("attempts"), UserAgent: "signagent/" + cmdutil.Version}, Log: e.Log}, s.Err()
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

// ServiceFlags say where the trusted service is and how to call it, with
// the partner's API key.
func ServiceFlags() []cli.Flag {
	return append(cmdutil.APIKeyFlags(),
		&cli.StringFlag{Name: "trusted-url", Category: cmdutil.CatService, EnvVars: []string{"SIGNAGENT_TRUSTED_URL"}, Usage: "the service's auth base `URL` (endpoints are below URL/auth/v5.16/)"},
		&cli.BoolFlag{Name: "insecure-http", Category: cmdutil.CatService, EnvVars: []string{"SIGNAGENT_INSECURE_HTTP"}, Usage: "allow plain http to a non-loopback base URL"},
		&cli.DurationFlag{Name: "request-timeout", Category: cmdutil.CatService, Value: 15 * time.Second, EnvVars: []string{"SIGNAGENT_REQUEST_TIMEOUT"}, Usage: "give up on one request after `DURATION`"},
		&cli.IntFlag{Name: "attempts", Category: cmdutil.CatService, Value: 3, EnvVars: []string{"SIGNAGENT_ATTEMPTS"}, Usage: "`N` tries of a request that failed in transport or with 5xx"},
		&cli.StringFlag{Name: "service-user-id", Category: cmdutil.CatService, Usage: "the user's `ID` in the trusted (partner) system"},
	)
}
