package agent_test

import (
	"context"
	"encoding/base64"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/emulator/emulatortest"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/signer/signertest"
	"github.com/signagent/signagent/trusted"
)

// reused is how many step-1 texts the emulator has refused as seen before.
func reused(emu *emulator.Server) int { return emu.Stats().Rejections[emulator.CodeSignatureReused] }

// TestAgentSessionsOneCredentialOneSecond: the agent's sessions for one
// credential under two serviceUserIds in the same second (the clock stands
// still) sign the same text; the second waits for the next second, both
// succeed, and the service never sees a text twice.
func TestAgentSessionsOneCredentialOneSecond(t *testing.T) {
	fixed := time.Now().UTC().Truncate(time.Second)
	h := start(t, options{now: func() time.Time { return fixed }})
	ctx := context.Background()
	if err := h.client.Link(ctx, "crm-43", "9161234567"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"crm-42", "crm-43"} {
		if _, err := h.client.Session(ctx, agentapi.SessionRequest{Credential: agentapi.Credential{Phone: "9161234567"}, ServiceUserID: id}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if n := reused(h.emu); n != 0 {
		t.Fatalf("the service saw a text twice (%d refusals)", n)
	}
}

// givenSignature is a Signer that returns a signature made elsewhere: the
// partner that asked the agent for it sends it itself.
type givenSignature []byte

func (g givenSignature) SignText(context.Context, []byte, time.Time) ([]byte, error) { return g, nil }

// TestAgentSignatureThenSession: a caller gets a signature from
// /v1/signatures and sends it to the service itself; a session the agent
// runs for the same credential in the same second must not send that
// text again. Each try starts just after a second begins; a try whose
// session request came in the next second proves nothing and is repeated.
func TestAgentSignatureThenSession(t *testing.T) {
	h := start(t, options{})
	ctx := context.Background()
	cred := agentapi.Credential{Phone: "9161234567"}
	for try := 1; ; try++ {
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 5*time.Millisecond)))
		second := time.Now().Truncate(time.Second)
		sig, err := h.client.Sign(ctx, agentapi.SignatureRequest{Credential: cred})
		if err != nil {
			t.Fatal(err)
		}
		der, _ := base64.StdEncoding.DecodeString(sig.Signature)
		ts, err := canonical.ParseTimestamp(sig.Timestamp)
		if err != nil {
			t.Fatal(err)
		}
		partner, err := trusted.New(trusted.Config{BaseURL: h.emu.URL(), APIKey: apiKey, Signer: givenSignature(der),
			Settings: httpx.Settings{Attempts: 1, Now: func() time.Time { return ts }}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := partner.Session(ctx, canonical.Credential{Kind: canonical.Phone, Value: cred.Phone}, "crm-42"); err != nil {
			t.Fatalf("the caller's own use of its signature: %v", err)
		}
		if time.Now().Truncate(time.Second) != second {
			if try == 5 {
				t.Fatal("never within one second")
			}
			continue
		}
		if _, err := h.client.Session(ctx, agentapi.SessionRequest{Credential: cred, ServiceUserID: "crm-42", Refresh: true}); err != nil {
			t.Fatal(err)
		}
		break
	}
	if n := reused(h.emu); n != 0 {
		t.Fatalf("the agent sent the text it had handed out (%d refusals)", n)
	}
}

// TestDaemonReloadKeepsStamps: a reload builds a new trusted client; it
// shares the daemon's timestamp memory, so a session right after the
// reload, in the same second (the clock stands still), for the same user
// does not send the text the one before it sent.
func TestDaemonReloadKeepsStamps(t *testing.T) {
	cfg, _ := daemonConfig(t)
	key, err := pkcs11.Open(context.Background(), cfg.Token, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	cert := key.Certificate()
	key.Close()
	emu := emulatortest.New(t, &emulator.Config{
		Partners: []emulator.Partner{{Name: "p", APIKey: apiKey, Certificates: []string{string(signertest.PEM(cert))}}},
		Users:    []emulator.User{{ID: "u1", Phone: "9161234567", Linked: []string{"p:crm-42"}}},
	}).Server
	fixed := time.Now().UTC().Truncate(time.Second)
	cfg.Service = &trusted.Config{BaseURL: emu.URL(), APIKey: apiKey, Settings: httpx.Settings{Backoff: 5 * time.Millisecond, Now: func() time.Time { return fixed }}}
	d, err := agent.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	c := agentclient.NewUnix(strings.TrimPrefix(cfg.Listen[0], "unix:"))
	session := func() {
		t.Helper()
		if _, err := c.Session(context.Background(), agentapi.SessionRequest{Credential: agentapi.Credential{Phone: "9161234567"}, ServiceUserID: "crm-42", Refresh: true}); err != nil {
			t.Fatal(err)
		}
	}
	session()
	if err := d.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	session()
	if n := reused(emu); n != 0 {
		t.Fatalf("the reloaded agent sent a text twice (%d refusals)", n)
	}
}

// TestStaleTimestampIsTheClock: a step-1 timestamp the service refuses as
// stale (the emulator's clock 10 minutes ahead of this machine's) is
// answered with the clock named and the skew measured from the answer's
// Date in error.message, not "a required parameter is missing".
func TestStaleTimestampIsTheClock(t *testing.T) {
	h := start(t, options{})
	h.advance(10 * time.Minute)
	_, err := h.client.Session(context.Background(), agentapi.SessionRequest{Credential: agentapi.Credential{Phone: "9161234567"}, ServiceUserID: "crm-42"})
	e := apiErr(t, err)
	// Date is to the second: the request may cross one.
	if e.Status != 422 || e.Body.ServiceCode != trusted.CodeStaleTimestamp ||
		!regexp.MustCompile(`this machine's clock is 10m[01]s behind the service's; set it right`).MatchString(e.Body.Message) {
		t.Fatalf("HTTP %d %+v", e.Status, e.Body)
	}
	if strings.Contains(e.Body.Message, "missing or malformed") {
		t.Fatalf("message %q", e.Body.Message)
	}
}
