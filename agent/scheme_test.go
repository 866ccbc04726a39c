package agent_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// robotEntry is a fourth scheme (the project has three), made for
// TestFourthScheme and built through the same list as legacy and OpenID
// Connect: its header names the certificate of the token the agent lends
// it (schemes.Deps.Decrypter) and is kept in the shared store it lends
// (schemes.Deps.Store), so that a second ask finds it there. The agent
// has no code of its own for it.
func robotEntry() schemes.Entry {
	return schemes.Entry{Name: "robot", Sources: []string{"store", "login"},
		Build: func(_ schemes.Settings, d schemes.Deps) (authz.Scheme, error) {
			if d.Store == nil {
				return authz.Off("robot", errdefs.New(errdefs.ErrNotConfigured, "robot needs a shared store")), nil
			}
			return robot{d}, nil
		}}
}

type robot struct{ d schemes.Deps }

func (robot) Name() string { return "robot" }

func (r robot) Authorizer(sel authz.Selector) (authz.Authorizer, error) {
	return robotAuthorizer{r.d, cmp.Or(sel.Profile, "default")}, nil
}

type robotAuthorizer struct {
	d       schemes.Deps
	profile string
}

func (a robotAuthorizer) Header(ctx context.Context) (authz.Header, error) {
	b, err := a.d.Store.Get(ctx, "robot", a.profile)
	if err == nil {
		return authz.Header{Value: string(b), Cached: true, Source: "store", ExpiresAt: time.Now().Add(time.Hour)}, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return authz.Header{}, err
	}
	cert, _, err := a.d.Decrypter()
	if err != nil {
		return authz.Header{}, err
	}
	l, err := a.d.Store.Acquire(ctx, "robot", a.profile)
	if err != nil {
		return authz.Header{}, err
	}
	defer l.Release()
	v := "Robot " + canonical.ThumbprintOf(cert)
	if err := a.d.Store.Put(ctx, "robot", a.profile, []byte(v), time.Hour, l); err != nil {
		return authz.Header{}, err
	}
	return authz.Header{Value: v, Source: "login", ExpiresAt: time.Now().Add(time.Hour)}, nil
}

// Reject drops the refused value from the store.
func (a robotAuthorizer) Reject(string) {
	ctx := context.Background()
	if l, err := a.d.Store.Acquire(ctx, "robot", a.profile); err == nil {
		a.d.Store.Delete(ctx, "robot", a.profile, l)
		l.Release()
	}
}

func (robotAuthorizer) Forget(time.Duration) {}
func (a robotAuthorizer) Identity() string   { return "profile " + a.profile }
func (a robotAuthorizer) String() string     { return "robot profile " + a.profile }

// TestFourthScheme: a scheme added to the list (Config.SchemeList) is
// lent the token and the shared store, counted from the first scrape
// under its name, named by /v1/authorizations and the Signagent-Identity
// header, and served like the agent's own: audited, and retried by the
// proxy after a 401 with a value obtained again.
func TestFourthScheme(t *testing.T) {
	h := start(t, options{apiURL: "emu", schemes: append(schemes.List(), robotEntry())})
	if m := h.metric(t, `signagent_authorization_sources_total{scheme="robot",source="login"}`); m != "0" {
		t.Fatalf("the robot's series before any call: %q", m)
	}
	ctx := context.Background()
	ask := func() (*agentapi.AuthorizationResponse, error) {
		return h.client.Authorization(ctx, agentapi.AuthorizationRequest{Scheme: "robot"})
	}
	if _, err := ask(); apiErr(t, err).Status != 503 {
		t.Fatalf("robot without a store: %v", err)
	}

	srv := storetest.Start(t)
	sealer, _ := store.NewSealer(bytes.Repeat([]byte{5}, 32))
	r, err := store.Open(srv.URL(), store.Options{Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h.reload(t, func(c *agent.Config) { c.SharedStore = r })

	want := "Robot " + canonical.ThumbprintOf(h.tk.RSA.Cert)
	if a, err := ask(); err != nil || a.Authorization != want || a.Cached {
		t.Fatalf("first robot header: %+v %v (want %q, not cached)", a, err, want)
	}
	if b, err := r.Get(ctx, "robot", "default"); err != nil || string(b) != want {
		t.Fatalf("in the store: %q %v", b, err)
	}
	if a, err := ask(); err != nil || a.Authorization != want || !a.Cached {
		t.Fatalf("second robot header: %+v %v (want it cached)", a, err)
	}
	if m := h.metric(t, `signagent_authorization_sources_total{scheme="robot",source="store"}`); m != "1" {
		t.Fatalf("robot headers from the store: %q", m)
	}
	if !strings.Contains(h.audit.String(), `"scheme":"robot","identity":"profile default"`) {
		t.Fatalf("audit: %s", h.audit.String())
	}

	// The business API knows no robots: the proxy rejects the value and
	// tries once more with one obtained again, then passes the 401 on.
	resp, body := h.call(t, "GET", "/v1/service/GetMyOrganizations?autoRegister=false", "robot profile=default", nil, "")
	if resp.StatusCode != 401 {
		t.Fatalf("the proxy with the robot's header: %d %s", resp.StatusCode, body)
	}
	if m := h.metric(t, `signagent_service_retries_total{method="GetMyOrganizations"}`); m != "1" {
		t.Fatalf("retries: %q", m)
	}
	if m := h.metric(t, `signagent_authorization_sources_total{scheme="robot",source="login"}`); m != "2" {
		t.Fatalf("robot logins (the first ask and the retry): %q", m)
	}

	// A scheme the agent does not serve is named with those it does.
	_, err = h.client.Authorization(ctx, agentapi.AuthorizationRequest{Scheme: "kerberos"})
	var names []string
	for _, e := range schemes.List() {
		names = append(names, e.Name)
	}
	if e := apiErr(t, err); e.Status != 400 || !strings.Contains(e.Body.Message, "want "+strings.Join(names, ", ")+" or robot") {
		t.Fatalf("%+v", e)
	}
}
