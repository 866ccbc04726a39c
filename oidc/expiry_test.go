package oidc

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestRefreshExpiries: when each profile must sign in again, as one
// process follows its records: a refresh token's expiry counts from its
// issue (the sign-in, or the refresh that returned a new one; the
// sign-in's when a record refreshed elsewhere is first seen), the access
// token's without a refresh token, now once the profile is signed out;
// a profile never held is never added.
func TestRefreshExpiries(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	now := t0.Add(40 * 24 * time.Hour)
	life := 10 * 24 * time.Hour
	st := Files{Dir: filepath.Join(t.TempDir(), "tokens")}
	tok := &Tokens{Store: st, RefreshLifetime: life, Now: func() time.Time { return now }}
	rec := func(profile, refresh string, refreshedAt time.Time) *Record {
		return &Record{Version: recordVersion, Profile: profile, AuthURL: "https://idp.example", ClientID: "crm", Subject: "s",
			AccessToken: "at-" + profile + refresh, TokenType: "Bearer", Expiry: now.Add(24 * time.Hour), RefreshToken: refresh,
			SignedInAt: t0, RefreshedAt: refreshedAt}
	}
	// see saves r and has the process read it again.
	see := func(r *Record) {
		t.Helper()
		if err := st.Save(r); err != nil {
			t.Fatal(err)
		}
		tok.forget(r.Profile)
		if _, _, err := tok.Token(context.Background(), r.Profile); err != nil {
			t.Fatal(err)
		}
	}
	want := func(profile string, at time.Time) {
		t.Helper()
		got, ok := tok.RefreshExpiries()[profile]
		if !ok || !got.Equal(at) {
			t.Errorf("%s: %v (%v), want %v", profile, got, ok, at)
		}
	}

	see(rec("fresh", "rt1", time.Time{}))
	want("fresh", t0.Add(life))

	t1 := t0.Add(5 * 24 * time.Hour)
	see(rec("elsewhere", "rt1", t1)) // refreshed by another process: rt1 may be the sign-in's
	want("elsewhere", t0.Add(life))
	t2 := t0.Add(8 * 24 * time.Hour)
	see(rec("elsewhere", "rt2", t2)) // a new refresh token: issued at that refresh
	want("elsewhere", t2.Add(life))
	see(rec("elsewhere", "rt2", t2.Add(24*time.Hour))) // refreshed, the same one kept
	want("elsewhere", t2.Add(life))

	noRefresh := rec("access-only", "", time.Time{})
	see(noRefresh)
	want("access-only", noRefresh.Expiry)

	if _, err := st.Remove("fresh"); err != nil {
		t.Fatal(err)
	}
	tok.forget("fresh")
	if _, _, err := tok.Token(context.Background(), "fresh"); err == nil {
		t.Fatal("a removed profile served")
	}
	want("fresh", now)

	if _, _, err := tok.Token(context.Background(), "never-signed-in"); err == nil {
		t.Fatal("an unknown profile served")
	}
	if got := tok.RefreshExpiries(); len(got) != 3 {
		t.Errorf("profiles held: %v, want fresh, elsewhere and access-only", got)
	}
}
