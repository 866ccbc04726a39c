package oidc

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// hangGuard is how long a test waits for a call that must end within
// its configured timeout (a fraction of a second) before it says the
// call is not bounded: long enough for a busy machine, short enough for
// the test to fail rather than hang.
const hangGuard = 20 * time.Second

// within runs call and returns its error, or fails the test when it has
// not returned after hangGuard.
func within(t *testing.T, what string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(hangGuard):
		t.Fatalf("%s did not end in %v: nothing bounds it", what, hangGuard)
		return nil
	}
}

// TestTricklingKeySetEnds: a key set whose answer trickles (its head at
// once, a byte now and then) is read within the configured timeout, as
// every other answer: go-oidc fetches it without a context, so the
// client's own time limit ends it. Before, the fetch went on for as long
// as the provider liked, and every id_token check after it (the next
// sign-in's, every refresh's) waited on that one fetch. Once it is cut,
// the next check fetches the key set again and succeeds.
func TestTricklingKeySetEnds(t *testing.T) {
	t.Parallel()
	f := newFakeIDP(t)
	ended := make(chan struct{})
	f.answerOnce("/jwks", f.trickle(ended))
	var sent string
	f.claims = func(string) map[string]any {
		return map[string]any{"iss": f.url, "sub": "alice", "aud": testClient, "exp": time.Now().Add(time.Hour).Unix(),
			"iat": time.Now().Unix(), "nonce": sent}
	}
	c, err := New(Config{AuthURL: f.url, ClientID: testClient, ClientSecret: testSecret, Space: SpaceStaging,
		RedirectURI: testRedirect, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	signIn := func() error {
		r, err := c.StartCode(context.Background())
		if err != nil {
			return err
		}
		sent = r.nonce
		// No deadline of the caller's: only the client's own bounds
		// the key set's fetch.
		_, err = c.FinishCode(context.Background(), r, url.Values{"code": {"c"}, "state": {r.state}})
		return err
	}
	err = within(t, "a sign-in against a trickling key set", signIn)
	if !errors.Is(err, ErrIDToken) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v", err)
	}
	t.Logf("the first sign-in: %v", err)
	<-ended // the client closed the trickling answer
	// The key set's failed fetch is forgotten as it ends; a check that
	// starts in that instant may still share it, so try a few times.
	for i := 0; ; i++ {
		err = within(t, "a sign-in after the trickle", signIn)
		if err == nil {
			break
		}
		if i == 20 {
			t.Fatalf("the key set is served again, but the sign-in fails: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTricklingDeviceAuthorizationEnds: the device authorization's
// answer that trickles ends at the configured timeout, and at the
// caller's deadline when that comes first, with one line saying the
// provider did not answer in time (before: x/oauth2 sends it without the
// context, and read it for as long as it trickled).
func TestTricklingDeviceAuthorizationEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		timeout, caller time.Duration
	}{
		{"the configured timeout", 300 * time.Millisecond, 0},
		{"the caller's deadline", 0, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeIDP(t)
			ended := make(chan struct{})
			f.answerOnce("/connect/deviceauthorization", f.trickle(ended))
			c, err := New(Config{AuthURL: f.url, ClientID: testClient, ClientSecret: testSecret, Space: SpaceStaging, Timeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Discover(t.Context()); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.caller > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.caller)
				defer cancel()
			}
			err = within(t, "a device authorization that trickles", func() error {
				_, err := c.StartDevice(ctx)
				return err
			})
			var te *httpx.TransportError
			if !errors.As(err, &te) || !errors.Is(err, errdefs.ErrTimeout) || !strings.Contains(err.Error(), "did not answer in time") ||
				strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), testSecret) {
				t.Fatalf("err = %v", err)
			}
			<-ended
		})
	}
}

// TestOversizedAnswersRefused: an answer of the provider that signagent
// reads itself is taken up to MaxAnswer bytes and refused past it, in
// one line naming the limit. Before, it was cut at the limit, and what
// was cut (here the JSON document and some of the spaces after it) was
// taken as the answer.
func TestOversizedAnswersRefused(t *testing.T) {
	t.Parallel()
	f := newFakeIDP(t)
	discovery := map[string]any{"issuer": f.url, "authorization_endpoint": f.url + "/connect/authorize",
		"token_endpoint": f.url + "/connect/token", "jwks_uri": f.url + "/jwks", "device_authorization_endpoint": f.url + "/connect/deviceauthorization"}
	f.setDevice(deviceAnswer(f, func(m map[string]any) { m["interval"] = 1 }))
	for _, tc := range []struct {
		name, path string
		doc        map[string]any
		call       func(c *Client) error
		fine       func(err error) bool // what an answer of exactly MaxAnswer gives
	}{
		{"discovery", "/.well-known/openid-configuration", discovery,
			func(c *Client) error { _, err := c.Discover(t.Context()); return err },
			func(err error) bool { return err == nil }},
		{"device authorization", "/connect/deviceauthorization", deviceAnswer(f, nil),
			func(c *Client) error { _, err := c.StartDevice(t.Context()); return err },
			func(err error) bool { return err == nil }},
		{"device poll", "/connect/token", map[string]any{"error": "access_denied"},
			func(c *Client) error {
				d, err := c.StartDevice(t.Context())
				if err != nil {
					return err
				}
				_, err = c.PollDevice(t.Context(), d)
				return err
			},
			func(err error) bool { return errors.Is(err, ErrDenied) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []int{MaxAnswer, MaxAnswer + 1} {
				c, err := New(Config{AuthURL: f.url, ClientID: testClient, ClientSecret: testSecret, Space: SpaceStaging})
				if err != nil {
					t.Fatal(err)
				}
				if tc.name != "discovery" {
					if _, err := c.Discover(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
				f.answerOnce(tc.path, sized(tc.doc, n))
				err = tc.call(c)
				if n == MaxAnswer {
					if !tc.fine(err) {
						t.Fatalf("an answer of exactly %d bytes: %v", n, err)
					}
					continue
				}
				var te *httpx.TransportError
				if !errors.As(err, &te) || !errors.Is(err, errdefs.ErrUnreachable) ||
					!strings.HasSuffix(err.Error(), "answered: the answer is larger than signagent reads (1 MiB)") {
					t.Fatalf("an answer of %d bytes: %v", n, err)
				}
			}
		})
	}
}
