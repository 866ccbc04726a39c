package idp

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/emulator/directory"
	"github.com/signagent/signagent/emulator/kit"
)

// TestIDTokenDatedAfterItsKey: the signing key is made at its first use,
// which took seconds under the race detector on a loaded machine; an
// id_token living as long as a 2 s access token, dated before that wait,
// arrived expired (TestFiguresSharedRefreshLoad in oidc failed so). Here
// making the key takes a minute of the emulator's clock: the token is
// dated after it, and lives its 2 s from then.
func TestIDTokenDatedAfterItsKey(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	env := kit.NewEnv(zerolog.Nop(), func() string { return "http://idp.test" })
	env.SetClock(clock)
	s := New(env, &directory.Directory{}, Config{AccessTokenTTL: kit.Duration(2 * time.Second)})
	s.idp.sk.generate = func() (*rsa.PrivateKey, error) {
		mu.Lock()
		now = now.Add(time.Minute)
		mu.Unlock()
		return rsa.GenerateKey(rand.Reader, 2048)
	}
	resp, err := s.issue(grant{client: "c", user: "u", scope: "openid"}, false, "")
	if err != nil {
		t.Fatal(err)
	}
	idt, _ := resp["id_token"].(string)
	parts := strings.Split(idt, ".")
	if len(parts) != 3 {
		t.Fatalf("id_token %q is no JWS", idt)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct{ Iat, Exp int64 }
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	if after := clock(); claims.Iat != after.Unix() || claims.Exp != after.Add(2*time.Second).Unix() {
		t.Fatalf("id_token iat %d, exp %d; the key was ready at %d: want iat %d and exp %d",
			claims.Iat, claims.Exp, after.Unix(), after.Unix(), after.Add(2*time.Second).Unix())
	}
}
