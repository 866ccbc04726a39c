package doctorcmd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/inspect"
	"github.com/signagent/signagent/pkcs11/probe"
	"github.com/signagent/signagent/store"
)

// files checks the files besides the secrets': the store key, the local
// token store's directory, and the agent's own.
func (d *run) files() {
	if f := d.st.KeyFile; f != "" {
		_, err := store.LoadKeyFile(f)
		d.result("store-key-file", err, f+" holds a store key and is closed to others")
	}
	if u := d.st.URL; u == "" || u == "local" {
		dir := d.oid.TokenStore
		if dir == "" {
			dir, _ = oidc.DefaultDir()
		}
		if dir != "" {
			d.result("token-store", oidc.Files{Dir: dir}.Check(), dir+" is this user's and closed to others (or not made yet)")
		}
	}
	if d.agent {
		d.agentFiles()
	}
}

// signing says whether the settings name a token (as the agent decides
// whether it signs).
func (d *run) signing() bool {
	for _, name := range []string{"module", "key", "token-label", "token-serial", "key-label", "key-id"} {
		if d.s.String(name) != "" {
			return true
		}
	}
	return d.svc.TrustedURL != ""
}

// token is the light part of token check, without a login: the module
// loads (in a child process first, as the agent probes it), the token the
// agent would open is there (inspect.PeekSelection: the module loaded once
// in this process), its PIN flags, and the key's certificate (found as the
// agent finds it, by the key's public half) with its validity.
func (d *run) token(ctx context.Context) {
	if !d.signing() {
		return
	}
	sel, err := cmdutil.SelectionFrom(d.s, false)
	if err == nil {
		sel, err = sel.Complete()
	}
	if err != nil {
		d.add("token", Fail, oneLine(err))
		return
	}
	tctx, cancel := context.WithTimeout(ctx, max(sel.Timeout, 10*time.Second))
	defer cancel()
	mod, err := pkcs11.ResolveModule(sel.Module, "flag")
	if err == nil {
		err = probe.Module(tctx, mod.Path)
	}
	var peek inspect.Peek
	if err == nil {
		peek, err = inspect.PeekSelection(tctx, sel)
	}
	if err != nil {
		d.add("token", Fail, oneLine(err))
		return
	}
	tok := peek.Token
	where := fmt.Sprintf("token %q (serial %s, slot %d) in module %s", tok.Label, tok.Serial, tok.Slot, mod.Path)
	switch {
	case slices.Contains(tok.Flags, "pin-locked"):
		d.add("token", Fail, where+": the token says its PIN is locked; unblock it with the SO PIN (the card's tool)")
	case slices.Contains(tok.Flags, "pin-final-try"):
		d.add("token", Warn, where+": the token says one more wrong PIN locks it; check the PIN file before anything logs in")
	case slices.Contains(tok.Flags, "pin-count-low"):
		d.add("token", Warn, where+": the token says a wrong PIN was entered")
	default:
		d.add("token", OK, where+" is there; no wrong PIN reported")
	}
	cert := peek.Cert
	if peek.CertErr != nil {
		d.add("certificate", Fail, oneLine(peek.CertErr))
		return
	}
	what := fmt.Sprintf("the certificate %q (thumbprint %s) on the token", cert.Subject.CommonName, canonical.ThumbprintOf(cert))
	if sel.CertFile != "" {
		what = fmt.Sprintf("%s (%s)", sel.CertFile, cert.Subject.CommonName)
	}
	d.addCertExpiry("certificate", what, cert.NotAfter)
}

// store pings the shared store and returns it open (nil for local, or
// when it cannot be opened).
func (d *run) store(ctx context.Context) *store.Shared {
	u := d.st.URL
	if u == "" || u == "local" {
		return nil
	}
	shared, err := d.f.Store()
	if err != nil {
		d.add("store", Fail, oneLine(err))
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	if err := shared.Ping(pctx); err != nil {
		d.add("store", Fail, oneLine(err)+"; check the address, the password and that Redis runs")
		return nil
	}
	d.add("store", OK, u+" answers")
	looked, foreign, err := shared.KeyCheck(pctx, 100)
	switch {
	case err != nil:
		d.add("store key", Fail, oneLine(err))
	case looked == 0:
		d.add("store key", OK, "the store holds no records yet to try the key on")
	case foreign > 0:
		d.add("store key", Fail, fmt.Sprintf("%d of the %d records looked at are sealed with a key not in %s: they are never found with it; give the key file the other agents use",
			foreign, looked, d.st.KeyFile))
	default:
		d.add("store key", OK, fmt.Sprintf("the %d records looked at are sealed with a key in %s", looked, d.st.KeyFile))
	}
	return shared
}

// oidc checks the identity provider (discovery) and the profile's
// sign-in, without refreshing: in the shared store, a record that opens
// with the key is the key's check.
func (d *run) oidc(ctx context.Context, shared *store.Shared) {
	authURL, clientID := d.oid.URL, d.oid.ClientID
	if authURL == "" {
		return
	}
	// The space only shapes a sign-in's scopes: any does for discovery.
	space := d.s.String("space")
	if space == "" {
		space = "production"
	}
	sec, err := d.f.ClientSecret()
	var c *oidc.Client
	if err == nil {
		c, err = oidc.New(oidc.Config{AuthURL: authURL, AllowInsecureHTTP: d.svc.InsecureHTTP, ClientID: clientID, ClientSecret: sec,
			Space: space, Timeout: d.timeout, Log: d.e.Log})
	}
	if err == nil {
		var found bool
		if found, err = c.Discover(ctx); err == nil {
			how := "its discovery document is read"
			if !found {
				how = "it publishes no discovery document: the /connect/* paths are used"
			}
			d.add("oidc discovery", OK, fmt.Sprintf("the identity provider at %s: %s", authURL, how))
		}
	}
	if err != nil {
		d.add("oidc discovery", Fail, oneLine(err))
	}
	var records oidc.Records
	if shared != nil {
		records = &oidc.InStore{S: shared, Name: d.st.URL}
	} else if dir := d.oid.TokenStore; dir != "" {
		records = oidc.Files{Dir: dir}
	} else if dir, err := oidc.DefaultDir(); err == nil {
		records = oidc.Files{Dir: dir}
	} else {
		d.add("oidc profile", Fail, oneLine(err))
		return
	}
	profile := cmdutil.ReadProfile(d.s)
	if profile == "" {
		profile = "default"
	}
	rec, err := records.Load(profile)
	switch {
	case errors.Is(err, oidc.ErrSignIn):
		d.add("oidc profile", Warn, oneLine(err))
		return
	case err != nil:
		d.add("oidc profile", Fail, oneLine(err))
		return
	}
	now := time.Now()
	who := fmt.Sprintf("profile %s (%s), signed in %s", profile, factory.Who(rec), rec.SignedInAt.UTC().Format(time.RFC3339))
	switch {
	case rec.RefreshToken == "" && !now.Before(rec.Expiry):
		d.add("oidc profile", Fail, who+": the access token expired at "+rec.Expiry.UTC().Format(time.RFC3339)+" and there is no refresh token; sign in again: signagent oidc login --profile "+profile)
	case rec.RefreshToken == "":
		d.add("oidc profile", Warn, who+": no refresh token (offline_access not granted): sign in again after "+rec.Expiry.UTC().Format(time.RFC3339))
	default:
		d.addRefreshExpiry(who, profile, rec, now)
	}
}

// addRefreshExpiry says when the profile's refresh token lapses. The
// provider does not say; --refresh-token-lifetime does (the agent's
// signagent_oidc_refresh_expiry_timestamp_seconds reads the same). The
// record tells when the access token was last obtained, not whether the
// provider issued a new refresh token then: so the latest the token can
// last is from the last refresh, and the earliest from the sign-in (a
// provider that keeps the first refresh token). Past the latest: fail;
// the earliest within 7 days: warn, naming both.
func (d *run) addRefreshExpiry(who, profile string, rec *oidc.Record, now time.Time) {
	life := d.s.Duration("refresh-token-lifetime")
	if life <= 0 {
		life = oidc.DefaultRefreshLifetime
	}
	latest, earliest := rec.ObtainedAt().Add(life), rec.SignedInAt.Add(life)
	stamp := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case !now.Before(latest):
		d.add("oidc profile", Fail, who+": the refresh token lapsed by "+stamp(latest)+" (--refresh-token-lifetime "+life.String()+
			" from its last use); sign in again: signagent oidc login --profile "+profile)
	case earliest.Sub(now) < 7*24*time.Hour && earliest.Before(latest):
		d.add("oidc profile", Warn, who+": the refresh token lapses by "+stamp(latest)+", or by "+stamp(earliest)+
			" if the provider keeps the sign-in's refresh token; sign in again before then if calls start asking: signagent oidc login --profile "+profile)
	case earliest.Sub(now) < 7*24*time.Hour:
		d.add("oidc profile", Warn, who+": the refresh token lapses by "+stamp(latest)+" (within 7 days); sign in again before then: signagent oidc login --profile "+profile)
	default:
		d.add("oidc profile", OK, who+": a refresh token is held (last used "+stamp(rec.ObtainedAt())+"); it lapses by "+stamp(earliest)+
			" at the earliest (--refresh-token-lifetime "+life.String()+")")
	}
}
