package cmdutil

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/store"
)

// The flag sets several families share, each with its typed reader: a
// command reads them through it, never by name.

// ServiceFlags say where the trusted service is and how to call it, with
// the partner's API key.
func ServiceFlags() []cli.Flag {
	return append(APIKeyFlags(),
		&cli.StringFlag{Name: "trusted-url", Category: CatService, EnvVars: []string{"SIGNAGENT_TRUSTED_URL"}, Usage: "the service's auth base `URL` (endpoints are below URL/auth/v5.16/)"},
		&cli.BoolFlag{Name: "insecure-http", Category: CatService, EnvVars: []string{"SIGNAGENT_INSECURE_HTTP"}, Usage: "allow plain http to a non-loopback base URL"},
		&cli.DurationFlag{Name: "request-timeout", Category: CatService, Value: 15 * time.Second, EnvVars: []string{"SIGNAGENT_REQUEST_TIMEOUT"}, Usage: "give up on one request after `DURATION`"},
		&cli.IntFlag{Name: "attempts", Category: CatService, Value: 3, EnvVars: []string{"SIGNAGENT_ATTEMPTS"}, Usage: "`N` tries of a request that failed in transport or with 5xx"},
		&cli.StringFlag{Name: "service-user-id", Category: CatService, Usage: "the user's `ID` in the trusted (partner) system"},
	)
}

// Service is what ServiceFlags say (the API key aside: a secret, read
// from its sources by APIKeyFrom).
type Service struct {
	TrustedURL     string
	InsecureHTTP   bool
	RequestTimeout time.Duration
	Attempts       int
	ServiceUserID  string
}

// ReadService reads ServiceFlags from s.
func ReadService(s *settings.Settings) Service {
	return Service{TrustedURL: s.String("trusted-url"), InsecureHTTP: s.Bool("insecure-http"), RequestTimeout: s.Duration("request-timeout"),
		Attempts: s.Int("attempts"), ServiceUserID: s.String("service-user-id")}
}

// BusinessFlags say where the business API is and which developer key
// calls it, and how long the legacy scheme's tokens live; the agent takes
// them too (the legacy commands pick them from its flags).
func BusinessFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "business-url", Category: CatLegacy, EnvVars: []string{"SIGNAGENT_BUSINESS_URL"}, Usage: "the service's business API `URL` (Authenticate is at URL/V3/Authenticate)"},
		DeveloperKeySpec.FlagWith(CatLegacy, ""),
		&cli.DurationFlag{Name: "legacy-token-ttl", Category: CatLegacy, Value: legacy.DefaultTokenTTL, EnvVars: []string{"SIGNAGENT_LEGACY_TOKEN_TTL"}, Usage: "`DURATION` a legacy token lives (the service's 24h); caches reuse it until a margin before"},
		&cli.IntFlag{Name: "legacy-challenge-size", Category: CatLegacy, Value: envelope.ChallengeSize, EnvVars: []string{"SIGNAGENT_LEGACY_CHALLENGE_SIZE"},
			Usage: fmt.Sprintf("`BYTES` of random a certificate login's challenge holds: the only length the token opens (%d to %d; change it only where a real service's challenge shows another)", envelope.MinChallengeSize, envelope.MaxChallengeSize)},
	}
}

// Business is what BusinessFlags say (the developer key aside: a
// secret, read from its sources).
type Business struct {
	URL           string
	TokenTTL      time.Duration
	ChallengeSize int
}

// ReadBusiness reads BusinessFlags from s.
func ReadBusiness(s *settings.Settings) Business {
	return Business{URL: s.String("business-url"), TokenTTL: s.Duration("legacy-token-ttl"), ChallengeSize: s.Int("legacy-challenge-size")}
}

// StoreFlags choose where records are kept (OpenID Connect records, and
// for the agent, header and api trusted sessions and legacy tokens): the
// local files and the process's memory, or a store several agents share.
func StoreFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "store", Category: CatStore, Value: "local", EnvVars: []string{"SIGNAGENT_STORE"}, Usage: "keep records (OpenID Connect records, sessions, legacy tokens) in `STORE`: local (the --token-store files, and memory) or a store several agents share: redis://[user@]host:port[/db], rediss://..., redis+sentinel://host:port[,...]/master[/db], redis+cluster://host:port[,...]; rediss+sentinel:// and rediss+cluster:// for TLS to every node"},
		&cli.StringFlag{Name: "store-key-file", Category: CatStore, EnvVars: []string{"SIGNAGENT_STORE_KEY_FILE"}, Usage: "the shared store's key `FILE` (64 hex characters, mode 0600; signagent store-key --out FILE makes one)"},
		StorePasswordSpec.FlagWith(CatStore, "; never in the URL"),
		&cli.StringFlag{Name: "store-prefix", Category: CatStore, Value: store.DefaultPrefix, EnvVars: []string{"SIGNAGENT_STORE_PREFIX"}, Usage: "start every Redis key with `PREFIX` (several deployments on one Redis)"},
		&cli.StringFlag{Name: "store-ca-file", Category: CatStore, EnvVars: []string{"SIGNAGENT_STORE_CA_FILE"}, Usage: "CA bundle `FILE` for rediss://, rediss+sentinel:// and rediss+cluster:// (default: the system's)"},
		&cli.BoolFlag{Name: "store-insecure", Category: CatStore, EnvVars: []string{"SIGNAGENT_STORE_INSECURE"}, Usage: "allow the store password over plain TCP (redis://) to a host beyond loopback"},
		&cli.IntFlag{Name: "store-wait-replicas", Category: CatStore, Value: 1, EnvVars: []string{"SIGNAGENT_STORE_WAIT_REPLICAS"}, Usage: "a write counts as done once `N` replicas have it (WAIT; as many as the master has, when fewer; 0: none)"},
	}
}

// Store is what StoreFlags say (the password aside: a secret, read from
// its sources).
type Store struct {
	// URL is --store: "" or "local" for none shared.
	URL          string
	KeyFile      string
	Prefix       string
	CAFile       string
	Insecure     bool
	WaitReplicas int
}

// Shared says whether the store is one several agents share.
func (st Store) Shared() bool { return st.URL != "" && st.URL != "local" }

// ReadStore reads StoreFlags from s.
func ReadStore(s *settings.Settings) Store {
	return Store{URL: s.String("store"), KeyFile: s.String("store-key-file"), Prefix: s.String("store-prefix"), CAFile: s.String("store-ca-file"),
		Insecure: s.Bool("store-insecure"), WaitReplicas: s.Int("store-wait-replicas")}
}

// OIDCFlags say which application signs in where, and where the tokens
// are kept (the store's flags with them). serve, header and api take them
// as they are (their --insecure-http and --request-timeout are the
// service's); the OpenID Connect commands add their own.
func OIDCFlags() []cli.Flag {
	return append(StoreFlags(), []cli.Flag{
		&cli.StringFlag{Name: "oidc-url", Category: CatOIDC, EnvVars: []string{"SIGNAGENT_OIDC_URL"}, Usage: "the identity provider's `URL` ({auth_url}; /connect/* is below it)"},
		&cli.StringFlag{Name: "client-id", Category: CatOIDC, EnvVars: []string{"SIGNAGENT_CLIENT_ID"}, Usage: "the application's `CLIENT_ID`"},
		ClientSecretSpec.FlagWith(CatOIDC, ""),
		&cli.StringFlag{Name: "token-store", Category: CatOIDC, EnvVars: []string{"SIGNAGENT_TOKEN_STORE"}, Usage: "keep the tokens in `DIR` (default $XDG_STATE_HOME/signagent, else ~/.local/state/signagent)"},
		&cli.DurationFlag{Name: "refresh-before", Category: CatOIDC, Value: oidc.DefaultRefreshBefore, EnvVars: []string{"SIGNAGENT_REFRESH_BEFORE"}, Usage: "refresh an access token with less than `DURATION` left (or an eighth of its lifetime, when shorter)"},
	}...)
}

// OIDC is what OIDCFlags say beyond the store's (the client secret
// aside: a secret, read from its sources).
type OIDC struct {
	URL           string
	ClientID      string
	TokenStore    string
	RefreshBefore time.Duration
}

// ReadOIDC reads OIDCFlags (but the store's) from s.
func ReadOIDC(s *settings.Settings) OIDC {
	return OIDC{URL: s.String("oidc-url"), ClientID: s.String("client-id"), TokenStore: s.String("token-store"), RefreshBefore: s.Duration("refresh-before")}
}

// ProfileFlag names the OpenID Connect profile a command signs in, uses
// or checks.
func ProfileFlag() cli.Flag {
	return &cli.StringFlag{Name: "profile", Category: CatOIDC, Value: "default", EnvVars: []string{"SIGNAGENT_PROFILE"}, Usage: "the token store's `NAME` for this sign-in"}
}

// ReadProfile reads ProfileFlag from s.
func ReadProfile(s *settings.Settings) string { return s.String("profile") }
