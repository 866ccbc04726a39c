package factory

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/schemes"
)

// legacyServiceFlags say where the business API is and which developer
// key calls it; the agent takes them too (ServeFlags), and the legacy
// commands pick them from there.
func legacyServiceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "business-url", Category: cmdutil.CatLegacy, EnvVars: []string{"SIGNAGENT_BUSINESS_URL"}, Usage: "the service's business API `URL` (Authenticate is at URL/V3/Authenticate)"},
		cmdutil.DeveloperKeySpec.FlagWith(cmdutil.CatLegacy, ""),
		&cli.DurationFlag{Name: "legacy-token-ttl", Category: cmdutil.CatLegacy, Value: legacy.DefaultTokenTTL, EnvVars: []string{"SIGNAGENT_LEGACY_TOKEN_TTL"}, Usage: "`DURATION` a legacy token lives (the service's 24h); caches reuse it until a margin before"},
		&cli.IntFlag{Name: "legacy-challenge-size", Category: cmdutil.CatLegacy, Value: envelope.ChallengeSize, EnvVars: []string{"SIGNAGENT_LEGACY_CHALLENGE_SIZE"},
			Usage: fmt.Sprintf("`BYTES` of random a certificate login's challenge holds: the only length the token opens (%d to %d; change it only where a real service's challenge shows another)", envelope.MinChallengeSize, envelope.MaxChallengeSize)},
	}
}

// Legacy is the legacy client of --business-url and the developer key.
func (f *Factory) Legacy() (*legacy.Client, error) {
	cfg, err := f.LegacyConfig()
	if err != nil {
		return nil, err
	}
	return legacy.New(*cfg)
}

// LegacyConfig is the legacy client's configuration as the settings give
// it: the business API's address and the developer key.
func (f *Factory) LegacyConfig() (*legacy.Config, error) { return legacyConfig(f.Settings(), f.Env) }

// legacyConfig is LegacyConfig for the settings s.
func legacyConfig(s *settings.Settings, e *cmdutil.Env) (*legacy.Config, error) {
	key, err := developerKey(s)
	if err != nil {
		return nil, err
	}
	if s.String("business-url") == "" {
		return nil, cmdutil.UsageErr(errors.New("give the service's business API address with --business-url or SIGNAGENT_BUSINESS_URL"))
	}
	if _, err := legacy.ParseAPIURL(s.String("business-url"), s.Bool("insecure-http")); err != nil {
		return nil, err
	}
	cfg := &legacy.Config{APIURL: s.String("business-url"), AllowInsecureHTTP: s.Bool("insecure-http"), DeveloperKey: key,
		TokenTTL: s.Duration("legacy-token-ttl"), ChallengeSize: s.Int("legacy-challenge-size"), Log: e.Log,
		Settings: httpx.Settings{Timeout: s.Duration("request-timeout"), Attempts: s.Int("attempts"), UserAgent: "signagent/" + cmdutil.Version}}
	return cfg, s.Err()
}

// legacyAgentConfig is the agent's legacy scheme: the client's
// configuration and the passwords of --legacy-password-file LOGIN=FILE.
func legacyAgentConfig(s *settings.Settings, e *cmdutil.Env) (*schemes.LegacySettings, error) {
	cfg, err := legacyConfig(s, e)
	if err != nil {
		return nil, err
	}
	pws := map[string]string{}
	for _, spec := range s.Strings("legacy-password-file") {
		login, src, err := cmdutil.LegacyPassword(spec)
		if err != nil {
			return nil, err
		}
		got, err := src.Resolve()
		if err != nil {
			return nil, errdefs.Mark(err, errdefs.ErrInvalidInput)
		}
		pws[login] = got.Value
	}
	return &schemes.LegacySettings{Client: cfg, Passwords: pws}, nil
}

// developerKey reads the developer key (see secretSpec for the order of
// its sources); never argv.
func developerKey(s *settings.Settings) (string, error) {
	return cmdutil.DeveloperKeySpec.Read(s, legacy.CheckDeveloperKey, legacy.ErrDeveloperKey)
}

// hasDeveloperKey reports whether a developer key is given at all.
func hasDeveloperKey(s *settings.Settings) bool { return cmdutil.DeveloperKeySpec.Source(s).Given() }
