package oidc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signagent/signagent/emulator"
	"github.com/signagent/signagent/errdefs"
)

func testRecord(profile string) *Record {
	return &Record{Profile: profile, AuthURL: "https://idp.example", ClientID: testClient, Subject: "alice",
		Scopes: []string{"openid", ScopeStaging}, AccessToken: strings.Repeat("ab", 32), TokenType: "Bearer",
		Expiry: time.Now().Add(time.Hour).UTC(), RefreshToken: "refresh-secret", SignedInAt: time.Now().UTC()}
}

func TestStoreRoundTrip(t *testing.T) {
	t.Parallel()
	s := Files{Dir: filepath.Join(t.TempDir(), "state", "signagent")}
	if _, err := s.Load("default"); !errors.Is(err, ErrSignIn) || !strings.Contains(err.Error(), "signagent oidc login") {
		t.Fatalf("missing: %v", err)
	}
	r := testRecord("default")
	if err := s.Save(r); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load("default")
	if err != nil || got.AccessToken != r.AccessToken || got.RefreshToken != r.RefreshToken || got.Space() != SpaceStaging {
		t.Fatalf("%+v %v", got, err)
	}
	for path, want := range map[string]os.FileMode{s.Dir: 0o700, s.Path("default"): 0o600} {
		if st, _ := os.Stat(path); st.Mode().Perm() != want {
			t.Errorf("%s: mode %v", path, st.Mode().Perm())
		}
	}
	if ok, err := s.Remove("default"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, _ := s.Remove("default"); ok {
		t.Fatal("removed twice")
	}
}

func TestStoreRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, s Files)
		want  string
	}{
		{"corrupt", func(t *testing.T, s Files) { writeFile(t, s.Path("p"), "{\"version\":1,", 0o600) }, "corrupt"},
		{"not a record", func(t *testing.T, s Files) { writeFile(t, s.Path("p"), "{\"version\":1,\"profile\":\"p\"}", 0o600) }, "corrupt"},
		{"another profile's", func(t *testing.T, s Files) {
			b, _ := os.ReadFile(s.Path("p"))
			writeFile(t, s.Path("p"), strings.Replace(string(b), `"profile": "p"`, `"profile": "q"`, 1), 0o600)
		}, "corrupt"},
		{"readable by others", func(t *testing.T, s Files) { os.Chmod(s.Path("p"), 0o644) }, "chmod 0600"},
		{"directory open to others", func(t *testing.T, s Files) { os.Chmod(s.Dir, 0o755) }, "chmod 0700"},
		{"a symlink", func(t *testing.T, s Files) {
			os.Rename(s.Path("p"), s.Path("p")+".real")
			os.Symlink(s.Path("p")+".real", s.Path("p"))
		}, "symbolic link"},
		{"of another user", func(t *testing.T, s Files) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give the file to another user (CI runs as root)")
			}
			os.Chown(s.Path("p"), 65534, 65534)
		}, "not to you"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Files{Dir: filepath.Join(t.TempDir(), "signagent")}
			if err := s.Save(testRecord("p")); err != nil {
				t.Fatal(err)
			}
			tc.spoil(t, s)
			_, err := s.Load("p")
			if !errors.Is(err, ErrStore) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "refresh-secret") {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func TestProfileNames(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", ".hidden", "-x", "_x", "../x", "a/b", "a b", "é", "a\x00", strings.Repeat("x", 65)} {
		if err := CheckProfile(bad); !errors.Is(err, errdefs.ErrInvalidInput) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	for _, good := range []string{"a", "default", "Z9", "x.y_z-1", "0" + strings.Repeat("x", 63)} {
		if err := CheckProfile(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
}

func TestTokensFreshNeedsNoProvider(t *testing.T) {
	t.Parallel()
	s := Files{Dir: t.TempDir() + "/s"}
	s.Save(testRecord("p"))
	tk := &Tokens{Store: s, Client: func(*Record) (*Client, error) { t.Fatal("a fresh token asked for a client"); return nil, nil }}
	rec, cached, err := tk.Token(t.Context(), "p")
	if err != nil || !cached || rec.Subject != "alice" {
		t.Fatal(rec, cached, err)
	}
}

// TestTokensOneRefresh: many callers in this process and a second Tokens
// on the same store (as another process would be) refresh a stale token:
// exactly one refresh reaches the provider and all get its token.
func TestTokensOneRefresh(t *testing.T) {
	t.Parallel()
	b := newBed(t, func(o *emulator.OIDCConfig) { o.RefreshRotation = "one-time" })
	c := b.client(t, nil)
	rec := deviceLogin(t, b, c)
	rec.Profile = "p"
	rec.SignedInAt = time.Now().Add(-time.Hour)   // an hour-long token...
	rec.Expiry = time.Now().Add(30 * time.Second) // ...under the 60 s margin
	s := Files{Dir: t.TempDir() + "/s"}
	if err := s.Save(rec); err != nil {
		t.Fatal(err)
	}
	before := b.tokenRequests.Load()
	var results sync.Map
	var refreshes []string
	var mu sync.Mutex
	newTokens := func() *Tokens {
		return &Tokens{Store: s, Client: func(*Record) (*Client, error) { return c, nil },
			OnRefresh: func(_, r string) { mu.Lock(); refreshes = append(refreshes, r); mu.Unlock() }}
	}
	a, z := newTokens(), newTokens()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			tk := a
			if i%2 == 1 {
				tk = z
			}
			r, _, err := tk.Token(t.Context(), "p")
			if err != nil {
				t.Error(err)
				return
			}
			results.Store(r.AccessToken, true)
		})
	}
	wg.Wait()
	n := 0
	results.Range(func(k, v any) bool { n++; return true })
	if got := b.tokenRequests.Load() - before; got != 1 || n != 1 || len(refreshes) != 1 {
		t.Fatalf("%d refresh requests, %d distinct tokens, refreshes %v", got, n, refreshes)
	}
	saved, _ := s.Load("p")
	if saved.RefreshToken == rec.RefreshToken || saved.AccessToken == rec.AccessToken {
		t.Fatal("the newest refresh token was not kept")
	}
}

func TestTokensRefusedRefresh(t *testing.T) {
	t.Parallel()
	b := newBed(t, nil)
	c := b.client(t, nil)
	rec := deviceLogin(t, b, c)
	rec.Profile = "p"
	rec.Expiry = time.Now().Add(-time.Minute)
	rec.RefreshToken = "rotated-away"
	s := Files{Dir: t.TempDir() + "/s"}
	s.Save(rec)
	var result string
	tk := &Tokens{Store: s, Client: func(*Record) (*Client, error) { return c, nil }, OnRefresh: func(_, r string) { result = r }}
	_, _, err := tk.Token(t.Context(), "p")
	if !errors.Is(err, ErrSignIn) || !strings.Contains(err.Error(), "signagent oidc login --profile p") || result != "refused" {
		t.Fatalf("err = %v, result %q", err, result)
	}
}

// TestRefreshMarginShortTokens: an access token is refreshed when less
// than Before (60 s) or an eighth of its lifetime is left, whichever is
// less: an 8-second token is used for 7 s, not refreshed on every call;
// an hour-long one keeps the 60 s margin.
func TestRefreshMarginShortTokens(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	tk := &Tokens{Before: 60 * time.Second, Now: func() time.Time { return now }}
	for _, tc := range []struct {
		name              string
		obtained, expires time.Duration // relative to now
		fresh             bool
	}{
		{"8s token, 1s old", -time.Second, 7 * time.Second, true},
		{"8s token, 6.5s old", -6500 * time.Millisecond, 1500 * time.Millisecond, true},
		{"8s token, 7.5s old", -7500 * time.Millisecond, 500 * time.Millisecond, false},
		{"refreshed 8s token, 1s old", -time.Second, 7 * time.Second, true},
		{"1h token, 58m old", -58 * time.Minute, 2 * time.Minute, true},
		{"1h token, 59m30s old", -(59*time.Minute + 30*time.Second), 30 * time.Second, false},
	} {
		r := &Record{Profile: "p", AccessToken: "at", SignedInAt: now.Add(tc.obtained), Expiry: now.Add(tc.expires)}
		if strings.HasPrefix(tc.name, "refreshed") {
			r.SignedInAt, r.RefreshedAt = now.Add(-time.Hour), now.Add(tc.obtained)
		}
		if got := tk.fresh(r); got != tc.fresh {
			t.Errorf("%s: fresh %v, want %v (margin %v)", tc.name, got, tc.fresh, tk.margin(r))
		}
	}
}
