package agent_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agent/access"
	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/legacy"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
	"github.com/signagent/signagent/schemes"
	"github.com/signagent/signagent/signer/signertest"
	"github.com/signagent/signagent/trusted"
)

const apiKey = "0F6C2E5B-9D4A-4C1E-8A2B-7E3D1F0A9B8C"

// harness is a SoftHSM token, the emulator, and an agent serving on a Unix
// socket, with a client.
type harness struct {
	tk     *pkcs11test.Token
	emu    *emulator.Server
	d      *agent.Daemon
	cfg    agent.Config // as last started or reloaded
	sock   string
	tcp    string // tcp:HOST:PORT, with options.bearer
	client *agentclient.Client
	logs   *pkcs11test.LogBuffer
	audit  *pkcs11test.LogBuffer
	opens  *atomic.Int64
	store  oidc.Files
	offset atomic.Int64 // the emulator's clock runs this far ahead
}

// advance moves the emulator's clock (tokens it issued expire).
func (h *harness) advance(d time.Duration) { h.offset.Add(int64(d)) }

type options struct {
	workers   int
	backlog   int
	delay     time.Duration
	deadline  time.Duration
	users     int // extra users user0..userN-1, linked as suid0..
	noService bool
	allowUIDs []int // Unix callers allowed (empty: anyone)
	allowGIDs []int
	bearer    string           // a TCP listener on loopback too, its callers' bearer token
	tls       agent.TLSFiles   // the TCP listener's
	timeout   time.Duration    // trusted client's request time-out
	now       func() time.Time // trusted client's clock (default time.Now)
	expose    bool             // ExposeCanonical
	routes    []access.RouteRule
	legacy    bool // the legacy scheme, with alice's password
	// legacyAPI, when set, is where the legacy scheme logs in instead of
	// the emulator (a stand-in for the service), with legacyNow its clock.
	legacyAPI string
	legacyNow func() time.Time
	oidc      bool   // the OpenID Connect scheme, alice signed in as profile "default"
	apiURL    string // the proxy's business API ("emu": the emulator)
	maxBody   int64  // ServiceMaxBody
	budget    int64  // ServiceBodyBudget
	// policy, applied after start; with legacy set, legacy headers are
	// handed out unless hideLegacy.
	hideLegacy, noCertLogin bool
	// floor is the RefreshFloor (default: a nanosecond, so that "refresh":
	// true replaces what it finds, as the tests of forced refreshes want).
	floor time.Duration
	// noToken starts the agent without a token (and so without the
	// trusted service): OpenID Connect and legacy passwords alone.
	noToken bool
	// auditFile writes the audit log to a file as serve does
	// (auditlog.Open), not to h.audit: for benchmarks, whose
	// in-memory log would only grow.
	auditFile bool
	// schemes is the agent's scheme list (default schemes.List()).
	schemes []schemes.Entry
	// idp changes the emulator's identity provider (refresh rotation,
	// token lifetimes).
	idp func(*emulator.OIDCConfig)
	// metrics adds a metrics listener on loopback (h.metricsAddr).
	metrics bool
}

// testCommit is the commit the harness's agents say they were built from.
const testCommit = "0123456789abcdef0123456789abcdef01234567"

// Alice's box, and another organization's.
const (
	myBox    = "3f2a0c1e-5b7d-4e8f-9a01-23456789abcd"
	otherBox = "7d1e2f30-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
)

const (
	devKey        = "testClient-0a1b2c3d4e"
	alicePassword = "correct horse battery"
)

func start(t testing.TB, o options) *harness {
	t.Helper()
	tk := pkcs11test.New(t)
	logs, audit := &pkcs11test.LogBuffer{}, &pkcs11test.LogBuffer{}
	log := zerolog.New(logs)
	h := &harness{tk: tk, logs: logs, audit: audit, opens: &atomic.Int64{}}

	// The cheapest bcrypt cost: the emulator checks the password at every
	// sign-in, and at the default cost that took seconds of CPU under -race.
	hashBytes, err := bcrypt.GenerateFromPassword([]byte(alicePassword), bcrypt.MinCost)
	hash := string(hashBytes)
	if err != nil {
		t.Fatal(err)
	}
	users := []emulator.User{{ID: "u1", Phone: "9161234567", SNILS: "11223344595", Linked: []string{"p:crm-42"},
		Login: "alice@example.com", PasswordHash: hash, Thumbprints: []string{canonical.ThumbprintOf(tk.RSA.Cert)}, Boxes: []string{myBox}}}
	for i := range o.users {
		users = append(users, emulator.User{ID: fmt.Sprintf("user%d", i), Phone: fmt.Sprintf("92000000%02d", i), Linked: []string{fmt.Sprintf("p:suid%d", i)}})
	}
	idp := emulator.OIDCConfig{Clients: []emulator.OIDCClient{{ID: oidcClientID, Secret: oidcSecret, RedirectURIs: []string{oidcRedirect}}},
		DeviceInterval: emulator.Duration(time.Second)}
	if o.idp != nil {
		o.idp(&idp)
	}
	emu := emulatortest.NewWith(t, &emulator.Config{
		Partners:   []emulator.Partner{{Name: "p", APIKey: apiKey, Certificates: []string{string(signertest.PEM(tk.RSA.Cert))}, CanLinkByPhone: true}},
		Developers: []emulator.Developer{{Name: "crm", Key: devKey}},
		Users:      users,
		OIDC:       idp,
		Organizations: []emulator.Organization{{ID: "org-1", FullName: "Horns and Hooves LLC", Boxes: []emulator.Box{{GUID: myBox}}},
			{ID: "org-2", FullName: "Someone Else JSC", Boxes: []emulator.Box{{GUID: otherBox}}}},
	}, emulatortest.Options{Log: logs, Now: func() time.Time { return time.Now().Add(time.Duration(h.offset.Load())) }}).Server
	h.emu = emu
	if o.apiURL == "emu" {
		o.apiURL = emu.URL()
	}
	cfg := agent.Config{
		Token: tk.Selection(tk.RSA.Label), NoToken: o.noToken, TokenConcurrency: cmp.Or(o.workers, 1), QueueSize: cmp.Or(o.backlog, 64), TokenDelay: o.delay,
		Open: func(ctx context.Context, sel pkcs11.Selection, log zerolog.Logger) (tokenq.Token, error) {
			h.opens.Add(1)
			return pkcs11.Open(ctx, sel, log)
		},
		APIKey: apiKey, SessionTTL: 12 * time.Hour, RequestDeadline: cmp.Or(o.deadline, agent.DefaultRequestDeadline), MaxBody: 64 << 10,
		Routes: o.routes, ServiceMaxBody: o.maxBody, ServiceBodyBudget: o.budget, APIURL: o.apiURL,
		Policy:       agent.Policy{ExposeCanonical: o.expose, ExposeLegacyHeader: o.legacy && !o.hideLegacy, NoCertificateLogin: o.noCertLogin},
		RefreshFloor: cmp.Or(o.floor, time.Nanosecond),
		AllowUIDs:    o.allowUIDs, AllowGIDs: o.allowGIDs, TLS: o.tls,
		Stderr: audit, Log: log, ShutdownGrace: 5 * time.Second, SchemeList: o.schemes, Commit: testCommit,
	}
	if o.metrics {
		cfg.MetricsListen = "127.0.0.1:0"
	}
	if !o.noService && !o.noToken {
		cfg.Service = &trusted.Config{BaseURL: emu.URL(), APIKey: apiKey, Settings: httpx.Settings{Timeout: o.timeout, Backoff: 5 * time.Millisecond, Now: o.now}, Log: log}
	}
	if o.auditFile {
		cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	}
	if o.legacy {
		cfg.Schemes.Legacy = &schemes.LegacySettings{Client: &legacy.Config{APIURL: cmp.Or(o.legacyAPI, emu.URL()), DeveloperKey: devKey, Settings: httpx.Settings{Backoff: time.Millisecond, Now: o.legacyNow}},
			Passwords: map[string]string{"alice@example.com": alicePassword, "bob@example.com": "not bob's password"}}
	}
	if o.oidc {
		h.store = h.signInOIDC(t)
		cfg.Schemes.OIDC = &schemes.OIDCSettings{Records: h.store, Client: func(*oidc.Record) (*oidc.Client, error) { return h.oidcClient(t), nil }}
	}
	h.serve(t, cfg, o.bearer)
	return h
}

// serve starts the agent of cfg on a Unix socket of its own (and a TCP
// one on loopback for bearer's callers), as serve does: agent.Start.
func (h *harness) serve(t testing.TB, cfg agent.Config, bearer string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sa") // short: a socket path has ~100 bytes at most
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h.sock = filepath.Join(dir, "agent.sock")
	cfg.Listen = []string{"unix:" + h.sock}
	if bearer != "" {
		cfg.Listen = append(cfg.Listen, "tcp:127.0.0.1:0")
		cfg.BearerTokenFile = filepath.Join(dir, "bearer-token")
		if err := os.WriteFile(cfg.BearerTokenFile, []byte(bearer+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h.d, err = agent.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.cfg = cfg
	for _, a := range h.d.Addrs() {
		if strings.HasPrefix(a, "tcp:") {
			h.tcp = a
		}
	}
	t.Cleanup(func() { h.shutdown(t) })
	h.client = agentclient.NewUnix(h.sock)
}

// reload changes the agent's configuration as serve does on SIGHUP:
// Daemon.Reload with the configuration change made.
func (h *harness) reload(t testing.TB, change func(c *agent.Config)) {
	t.Helper()
	cfg := h.cfg
	change(&cfg)
	if err := h.d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	h.cfg = cfg
}

// shutdown stops serving, lets requests in flight finish (5 s at most)
// and closes the token; later calls return at once.
func (h *harness) shutdown(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.ShutdownGrace)
	defer cancel()
	h.d.Shutdown(ctx)
}

// apiErr returns the agent's error, failing the test if err is not one.
func apiErr(t testing.TB, err error) *agentclient.Error {
	t.Helper()
	var e *agentclient.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want an agent error", err)
	}
	return e
}

// eventually polls cond until it holds or the time is up.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func emuDelay(d time.Duration) emulator.Fault { return emulator.Fault{Delay: d} }
func emuStatus(s int) emulator.Fault          { return emulator.Fault{Status: s} }

// metric returns the value of the unlabelled metric name from /metrics.
func (h *harness) metric(t *testing.T, name string) string {
	t.Helper()
	_, _, body := raw(t, h.sock, "GET", "/metrics", "")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("no metric %s in:\n%s", name, body)
	return ""
}

// second is another agent on the harness's emulator and token, with its
// own token manager, trusted client, caches and socket: a second instance
// of the partner system's agent (no legacy scheme, no OpenID Connect,
// nothing shared until a reload says so).
func (h *harness) second(t testing.TB) *harness {
	t.Helper()
	b := &harness{tk: h.tk, emu: h.emu, logs: h.logs, audit: h.audit, opens: h.opens}
	cfg := h.cfg
	cfg.Schemes, cfg.SchemeList, cfg.SharedStore, cfg.APIURL, cfg.AuditLog = schemes.Settings{}, nil, nil, "", ""
	cfg.Policy, cfg.Routes = agent.Policy{}, nil
	if cfg.Service == nil {
		cfg.Service = &trusted.Config{BaseURL: h.emu.URL(), APIKey: apiKey, Settings: httpx.Settings{Backoff: 5 * time.Millisecond}, Log: cfg.Log}
	}
	b.serve(t, cfg, "")
	return b
}

// queue is the token's queue as /readyz reports it.
func (h *harness) queue(t testing.TB) agentapi.QueueState {
	t.Helper()
	r, err := h.client.Ready(context.Background())
	if err != nil || r.Queue == nil {
		t.Fatalf("/readyz: %+v %v", r, err)
	}
	return *r.Queue
}
