package doctorcmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agent/auditlog"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/safefile"
	"github.com/signagent/signagent/trusted"
)

// The clock's limits against the service's Date: the service refuses a
// step-1 timestamp some minutes off (the emulator's default is 5m).
const (
	clockWarn = 5 * time.Second
	clockFail = 60 * time.Second
)

// keys are the secrets the service checks, as read (empty: none usable).
type keys struct{ apiKey, developerKey string }

// secrets reads every secret the settings name, as the commands would
// (their files' modes and owners included), and says where each came
// from; no value is shown, and the PIN is not tried.
func (d *run) secrets() keys {
	var k keys
	read := func(name string, src secret.Source, need string) (string, bool) {
		if !src.Given() {
			if need != "" {
				d.add(name, Fail, need)
			}
			return "", false
		}
		got, err := src.Resolve()
		if err != nil {
			d.add(name, Fail, oneLine(err))
			return "", false
		}
		return got.Value, d.result(name, nil, "read from "+got.From)
	}
	need := ""
	if d.svc.TrustedURL != "" {
		need = "none given, and --trusted-url needs one: set SIGNAGENT_API_KEY or give --api-key-file"
	}
	if _, ok := read("api-key", cmdutil.APIKeySpec.Source(d.s), need); ok {
		var err error
		if k.apiKey, err = cmdutil.APIKeyFrom(d.s); err != nil {
			d.checks[len(d.checks)-1] = Check{"api-key", Fail, oneLine(err)}
		}
	}
	if v, ok := read("developer-key", cmdutil.DeveloperKeySpec.Source(d.s), ""); ok {
		var err error
		if k.developerKey, err = legacy.CheckDeveloperKey(v); err != nil {
			d.checks[len(d.checks)-1] = Check{"developer-key", Fail, oneLine(err)}
		}
	}
	if _, ok := read("client-secret", cmdutil.ClientSecretSpec.Source(d.s), ""); !ok && d.oid.URL != "" && !cmdutil.ClientSecretSpec.Source(d.s).Given() {
		d.add("client-secret", Warn, "none given: an access token is not refreshed without it (set SIGNAGENT_CLIENT_SECRET or give --client-secret-file)")
	}
	read("store-password", cmdutil.StorePasswordSpec.Source(d.s), "")
	if pin := cmdutil.PINSource(d.s, false, ""); pin.Given() {
		if _, ok := read("pin", pin, ""); ok {
			d.checks[len(d.checks)-1].Detail += "; not tried: a wrong PIN costs one of the token's tries (signagent token check tries it)"
		}
	}
	if d.agent {
		for _, spec := range d.s.Strings("legacy-password-file") {
			login, src, err := cmdutil.LegacyPassword(spec)
			if err != nil {
				d.add("legacy-password-file", Fail, oneLine(err))
				continue
			}
			read("legacy-password-file "+login, src, "")
		}
	}
	return k
}

// services are the addresses checked, in the order their Date is taken
// for the clock: the trusted service's timestamps are what the clock
// spoils.
var services = []struct{ setting, peer string }{
	{"trusted-url", "the service"},
	{"business-url", "the business API"},
	{"oidc-url", "the identity provider"},
}

// addresses reaches each address the settings give over HTTPS (plain http
// only to loopback, or with --insecure-http), as the commands would, and
// notes the first Date for the clock.
func (d *run) addresses(ctx context.Context) {
	client := httpx.Client(nil)
	client.Timeout = d.timeout
	for _, sv := range services {
		raw := d.s.String(sv.setting)
		if raw == "" {
			continue
		}
		u, err := httpx.ParseBaseURL(raw, d.svc.InsecureHTTP)
		if err != nil {
			d.add(sv.setting, Fail, fmt.Sprintf("%s: %v", raw, oneLine(err)))
			continue
		}
		sent := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			d.add(sv.setting, Fail, oneLine(err))
			continue
		}
		req.Header.Set("User-Agent", "signagent/"+cmdutil.Version+" (doctor)")
		resp, err := client.Do(req)
		if err != nil {
			d.add(sv.setting, Fail, fmt.Sprintf("could not reach %s at %s: %v; check the address, DNS, a proxy (HTTPS_PROXY) and the firewall", sv.peer, u, httpx.CleanErr(err)))
			continue
		}
		resp.Body.Close()
		took := time.Since(sent).Round(time.Millisecond)
		if skew, ok := httpx.ClockSkew(resp.Header, sent); ok && d.skewFrom == "" {
			d.skew, d.skewFrom = skew, sv.peer
		}
		d.addTLS(sv.setting, fmt.Sprintf("%s answered HTTP %d in %v", u, resp.StatusCode, took), resp.TLS)
	}
}

// addTLS adds a reached address's line with what its TLS says: a
// certificate that expires within 14 days is a warning.
func (d *run) addTLS(name, detail string, st *tls.ConnectionState) {
	if st == nil {
		d.add(name, OK, detail+", plain http (loopback or --insecure-http)")
		return
	}
	leaf := st.PeerCertificates[0]
	detail += fmt.Sprintf(" over %s, certificate verified, valid until %s", tls.VersionName(st.Version), leaf.NotAfter.UTC().Format(time.DateOnly))
	if left := time.Until(leaf.NotAfter); left < 14*24*time.Hour {
		d.add(name, Warn, detail+fmt.Sprintf(": it expires in %v; tell the service's operator", left.Round(time.Hour)))
		return
	}
	d.add(name, OK, detail)
}

// clock compares this machine's clock with the service's Date.
func (d *run) clock() {
	if d.skewFrom == "" {
		if len(d.checks) > 0 && d.anyAddress() {
			d.add("clock", Warn, "no answer carried a Date to compare this machine's clock with")
		}
		return
	}
	abs := max(d.skew, -d.skew)
	said := httpx.DescribeSkew(d.skew, d.skewFrom)
	switch {
	case abs > clockFail:
		d.add("clock", Fail, said+": the service refuses timestamps this far off; set the clock (timedatectl set-ntp true, or chronyc makestep)")
	case abs > clockWarn:
		d.add("clock", Warn, said+": more than 5s; check time synchronization (timedatectl status)")
	default:
		d.add("clock", OK, said+" (within 5s)")
	}
}

func (d *run) anyAddress() bool {
	for _, sv := range services {
		if d.s.String(sv.setting) != "" {
			return true
		}
	}
	return false
}

// serviceKeys asks the service whether it accepts the API key and the
// developer key, by calls that change nothing (trusted.CheckAPIKey,
// legacy.CheckKey), each sent once.
func (d *run) serviceKeys(ctx context.Context, k keys) {
	if k.apiKey != "" && d.svc.TrustedURL != "" {
		cfg, err := d.f.TrustedConfig(k.apiKey)
		var c *trusted.Client
		if err == nil {
			cfg.Attempts, cfg.Timeout = 1, d.timeout
			c, err = trusted.New(*cfg)
		}
		if err == nil {
			err = c.CheckAPIKey(ctx)
		}
		d.keyResult("api-key accepted", err, "the service accepts the API key (step 1 without a credential answered 400, not InvalidApiKey)")
	}
	if k.developerKey != "" && d.biz.URL != "" {
		cfg, err := d.f.LegacyConfig()
		var c *legacy.Client
		if err == nil {
			cfg.Attempts, cfg.Timeout = 1, d.timeout
			c, err = legacy.New(*cfg)
		}
		if err == nil {
			err = c.CheckKey(ctx)
		}
		d.keyResult("developer-key accepted", err, "the service knows the developer key (Authenticate without a type answered 400, not 401)")
	}
}

// keyResult is a key check's line: a refusal fails, a service that could
// not be asked is a warning (the address's own line says why).
func (d *run) keyResult(name string, err error, ok string) {
	var te *httpx.TransportError
	switch {
	case err == nil:
		d.add(name, OK, ok)
	case errors.As(err, &te):
		d.add(name, Warn, "could not be asked: "+oneLine(err))
	default:
		d.add(name, Fail, oneLine(err))
	}
}

// agentFiles checks the agent's own files (--agent-config) with the
// agent's own functions, so that doctor and serve cannot disagree: the
// bearer token (agent.ReadBearerToken), the TLS files (their Config), the
// audit log (auditlog.Check).
func (d *run) agentFiles() {
	if f := d.s.String("bearer-token-file"); f != "" {
		_, err := agent.ReadBearerToken(f)
		if errors.Is(err, os.ErrNotExist) {
			d.add("bearer-token-file", OK, f+" is not there yet: the agent makes it (0600) when it starts")
		} else {
			d.result("bearer-token-file", err, f+" holds a bearer token and is closed to others")
		}
	}
	files := agent.TLSFiles{Cert: d.s.String("tls-cert"), Key: d.s.String("tls-key"), ClientCA: d.s.String("tls-client-ca")}
	if cfg, err := files.Config(); err != nil {
		name := "tls-cert"
		if errors.Is(err, safefile.ErrSecretMode) {
			name = "tls-key"
		}
		d.add(name, Fail, oneLine(err))
	} else if cfg != nil {
		leaf := cfg.Certificates[0].Leaf
		if leaf == nil { // GODEBUG x509keypairleaf=0
			leaf, err = x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
		}
		if err != nil {
			d.add("tls-cert", Fail, fmt.Sprintf("%s: %v", files.Cert, err))
		} else {
			d.addCertExpiry("tls-cert", files.Cert, leaf.NotAfter)
		}
	}
	if f := d.s.String("audit-log"); f != "" && f != "-" {
		err := auditlog.Check(f)
		if errors.Is(err, os.ErrNotExist) {
			d.add("audit-log", OK, f+" is not there yet: the agent makes it (0600) when it starts")
		} else {
			d.result("audit-log", err, f+" is this user's and closed to others")
		}
	}
}

// addCertExpiry says when a certificate of ours expires: past is a
// failure, within 30 days a warning.
func (d *run) addCertExpiry(name, what string, notAfter time.Time) {
	left := time.Until(notAfter)
	on := notAfter.UTC().Format(time.DateOnly)
	switch {
	case left <= 0:
		d.add(name, Fail, fmt.Sprintf("%s expired on %s; renew it", what, on))
	case left < 30*24*time.Hour:
		d.add(name, Warn, fmt.Sprintf("%s expires on %s, in %v; renew it", what, on, left.Round(time.Hour)))
	default:
		d.add(name, OK, fmt.Sprintf("%s is valid until %s", what, on))
	}
}
