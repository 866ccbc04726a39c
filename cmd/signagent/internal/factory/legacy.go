package factory

import (
	"errors"

	"github.com/signagent/signagent/business"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/schemes"
)

// Legacy is the legacy client of --business-url and the developer key.
func (f *Factory) Legacy() (*legacy.Client, error) {
	cfg, err := f.LegacyConfig()
	if err != nil {
		return nil, err
	}
	return legacy.New(*cfg)
}

// BusinessConfig is the business API's client configuration as the
// settings give it (signagent api's calls).
func (f *Factory) BusinessConfig() business.Config {
	s := f.Settings()
	b, svc := cmdutil.ReadBusiness(s), cmdutil.ReadService(s)
	return business.Config{APIURL: b.URL, AllowInsecureHTTP: svc.InsecureHTTP, Timeout: svc.RequestTimeout, UserAgent: "signagent/" + cmdutil.Version}
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
	b, svc := cmdutil.ReadBusiness(s), cmdutil.ReadService(s)
	if b.URL == "" {
		return nil, cmdutil.UsageErr(errors.New("give the service's business API address with --business-url or SIGNAGENT_BUSINESS_URL"))
	}
	if _, err := legacy.ParseAPIURL(b.URL, svc.InsecureHTTP); err != nil {
		return nil, err
	}
	cfg := &legacy.Config{APIURL: b.URL, AllowInsecureHTTP: svc.InsecureHTTP, DeveloperKey: key,
		TokenTTL: b.TokenTTL, ChallengeSize: b.ChallengeSize, Log: e.Log,
		Settings: httpx.Settings{Timeout: svc.RequestTimeout, Attempts: svc.Attempts, UserAgent: "signagent/" + cmdutil.Version}}
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
