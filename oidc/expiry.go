package oidc

import (
	"crypto/sha256"
	"time"
)

// DefaultRefreshLifetime is how long a refresh token lasts unless told
// otherwise (Tokens.RefreshLifetime): 30 days, as the service's provider
// documents it (the token answer does not say).
const DefaultRefreshLifetime = 30 * 24 * time.Hour

// heldRefresh is the refresh token a profile's record held when this
// process last saw it (a digest: the record holds the token itself), when
// that token was issued, the access token's expiry (what ends the profile
// without a refresh token), and since when the profile must sign in
// again, once the provider or the store said so.
type heldRefresh struct {
	sum        [sha256.Size]byte
	hasRefresh bool
	issued     time.Time
	access     time.Time
	signOut    time.Time
}

// noteRefresh follows rec's refresh token (t.mu held): one this process
// has not seen before for the profile was issued when rec was obtained
// (signed in or refreshed), except on the first sighting of a record that
// has been refreshed, where whether the last refresh returned a new one
// cannot be told: it is then taken to be the sign-in's, the earliest it
// can be, so that the expiry is never later than the truth (a provider
// that returns a new one on each refresh has it corrected at the next).
func (t *Tokens) noteRefresh(profile string, rec *Record) {
	if t.held == nil {
		t.held = map[string]heldRefresh{}
	}
	sum := sha256.Sum256([]byte(rec.RefreshToken))
	h, seen := t.held[profile]
	if !seen || h.sum != sum {
		h.issued = rec.ObtainedAt()
		if !seen {
			h.issued = rec.SignedInAt
		}
	}
	h.sum, h.hasRefresh, h.access, h.signOut = sum, rec.RefreshToken != "", rec.Expiry, time.Time{}
	t.held[profile] = h
}

// noteSignOut says a profile this process holds must sign in again now
// (its refresh was refused, or its record is gone). A profile it does not
// hold is not added: callers cannot grow the map with names.
func (t *Tokens) noteSignOut(profile string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.held[profile]; ok && h.signOut.IsZero() {
		h.signOut = t.now()
		t.held[profile] = h
	}
}

// RefreshExpiries is, by profile this process has held a record of, when
// it will have to sign in again: its refresh token's issue plus
// RefreshLifetime, its access token's expiry without a refresh token, or
// when it was told to sign in again.
func (t *Tokens) RefreshExpiries() map[string]time.Time {
	life := t.RefreshLifetime
	if life <= 0 {
		life = DefaultRefreshLifetime
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]time.Time, len(t.held))
	for profile, h := range t.held {
		switch {
		case !h.signOut.IsZero():
			out[profile] = h.signOut
		case !h.hasRefresh:
			out[profile] = h.access
		default:
			out[profile] = h.issued.Add(life)
		}
	}
	return out
}

// RefreshExpiries is the scheme's profiles' (Tokens.RefreshExpiries).
func (s Scheme) RefreshExpiries() map[string]time.Time { return s.Tokens.RefreshExpiries() }
