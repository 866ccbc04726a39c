package trusted_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/signer"
	"github.com/signagent/signagent/trusted"
)

// stampSigner records the timestamps of the texts it signs.
type stampSigner struct {
	trusted.Signer
	mu  sync.Mutex
	got []time.Time
}

func (s *stampSigner) SignText(ctx context.Context, text []byte, ts time.Time) ([]byte, error) {
	s.mu.Lock()
	s.got = append(s.got, ts)
	s.mu.Unlock()
	return s.Signer.SignText(ctx, text, ts)
}

// TestOneCredentialTwiceInOneSecond: two sessions for one credential in
// the same second (the clock stands still), for two serviceUserIds: the
// signed text does not hold the serviceUserId, so the second text would be
// the first again. The second waits for the next second and both succeed;
// the service never sees a text twice. The same holds for two clients
// sharing one Stamps (the agent's clients across reloads).
func TestOneCredentialTwiceInOneSecond(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.linked(t)
	if err := e.client.Link(context.Background(), "crm-user-43", cred); err != nil {
		t.Fatal(err)
	}
	for i, shared := range []bool{false, true} {
		fixed := time.Now().UTC().Truncate(time.Second).Add(time.Duration(i) * 10 * time.Second)
		sig := &stampSigner{Signer: &signer.CMS{Key: e.key, Cert: e.key.Certificate()}}
		stamps := trusted.NewStamps()
		edit := func(c *trusted.Config) {
			c.Now, c.Signer, c.Stamps = func() time.Time { return fixed }, sig, stamps
		}
		first, second := e.newClient(t, edit), e.newClient(t, edit)
		if !shared {
			second = first
		}
		if _, err := first.Session(context.Background(), cred, serviceUser); err != nil {
			t.Fatal(err)
		}
		if _, err := second.Session(context.Background(), cred, "crm-user-43"); err != nil {
			t.Fatal(err)
		}
		if n := e.emu.Stats().Rejections[emulator.CodeSignatureReused]; n != 0 {
			t.Fatalf("shared=%v: the service saw a text twice (%d refusals)", shared, n)
		}
		if len(sig.got) != 2 || !sig.got[1].Equal(sig.got[0].Add(time.Second)) {
			t.Fatalf("shared=%v: texts stamped %v, want two seconds in a row", shared, sig.got)
		}
	}
}

// TestSignatureReusedNamedPlainly: two processes (two clients, each with
// its own Stamps) cannot coordinate. With one attempt, the second one's
// refusal names what happened and what to do, not "a required parameter
// is missing".
func TestSignatureReusedNamedPlainly(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.linked(t)
	fixed := time.Now().UTC().Truncate(time.Second)
	once := func(c *trusted.Config) { c.Now, c.Attempts = func() time.Time { return fixed }, 1 }
	if _, err := e.newClient(t, once).Session(context.Background(), cred, serviceUser); err != nil {
		t.Fatal(err)
	}
	_, err := e.newClient(t, once).Session(context.Background(), cred, serviceUser)
	var se *trusted.ServiceError
	if !errors.As(err, &se) || !se.Reused() || se.Temporary() {
		t.Fatalf("err = %v, want SignatureReused", err)
	}
	want := "authenticate-by-truster: the service answered HTTP 400 SignatureReused: the service refused a signature it had already seen: " +
		"another process signed the same text (this API key and credential, the same second) a moment ago; try again after a second"
	if err.Error() != want || strings.Contains(err.Error(), "missing") {
		t.Fatalf("err = %q", err)
	}
}

// TestStampsBounded: a second noted as handed out elsewhere is skipped
// (the API key's case does not matter, as in the text); a burst for one
// credential then takes one second each, up to MaxStampWait ahead, and
// past that Next refuses at once (ErrTooSoon). Another credential is not
// held up.
func TestStampsBounded(t *testing.T) {
	whole := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return whole.Add(-time.Millisecond) } // the second before whole, nearly over
	s := trusted.NewStamps()
	cred := canonical.Credential{Kind: canonical.Phone, Value: userPhone}
	s.Note(now, apiKey, cred, whole.Add(-time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // every stamp below lies ahead, so Next returns instead of waiting for it
	waited := 0
	for ; waited <= 10; waited++ {
		_, err := s.Next(ctx, now, strings.ToLower(apiKey), cred)
		if errors.Is(err, trusted.ErrTooSoon) {
			if !strings.Contains(err.Error(), "******4567") {
				t.Fatalf("err = %v", err)
			}
			break
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("stamp %d was not ahead: %v", waited, err)
		}
	}
	if waited != int(trusted.MaxStampWait/time.Second) {
		t.Fatalf("%d stamps ahead before the bound, want %v worth", waited, trusted.MaxStampWait)
	}
	other := canonical.Credential{Kind: canonical.Phone, Value: "9160000002"}
	if ts, err := s.Next(ctx, now, apiKey, other); err != nil || !ts.Equal(whole.Add(-time.Second)) {
		t.Fatalf("another credential: %v %v", ts, err)
	}
}

// TestStampsHandout: a text handed to a caller avoids the second a session
// sent in, without waiting; texts handed out in one second are the same;
// the next session avoids both.
func TestStampsHandout(t *testing.T) {
	whole := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return whole }
	s := trusted.NewStamps()
	cred := canonical.Credential{Kind: canonical.SNILS, Value: userSNILS}
	if ts, err := s.Next(context.Background(), now, apiKey, cred); err != nil || !ts.Equal(whole) {
		t.Fatalf("a session: %v %v", ts, err)
	}
	for range 3 {
		if ts := s.Handout(now, apiKey, cred); !ts.Equal(whole.Add(time.Second)) {
			t.Fatalf("a handout in the session's second: %v", ts)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	later := func() time.Time { return whole.Add(time.Second) } // the handed-out second has come
	if ts, err := s.Next(ctx, later, apiKey, cred); !errors.Is(err, context.Canceled) {
		t.Fatalf("the next session took %v (%v), not a later second", ts, err)
	}
	other := canonical.Credential{Kind: canonical.SNILS, Value: "11223344596"}
	if ts := s.Handout(now, apiKey, other); !ts.Equal(whole) {
		t.Fatalf("another credential's handout: %v", ts)
	}
}
