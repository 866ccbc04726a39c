package oidc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/safefile"
)

const recordVersion = 1

// Record is one profile's tokens as the store keeps them.
type Record struct {
	Version      int       `json:"version"`
	Profile      string    `json:"profile"`
	AuthURL      string    `json:"authUrl"`
	ClientID     string    `json:"clientId"`
	Subject      string    `json:"subject"`
	Email        string    `json:"email,omitempty"`
	Name         string    `json:"name,omitempty"`
	Scopes       []string  `json:"scopes"`
	AccessToken  string    `json:"accessToken"`
	TokenType    string    `json:"tokenType"`
	Expiry       time.Time `json:"expiresAt"`
	RefreshToken string    `json:"refreshToken,omitempty"`
	Nonce        string    `json:"nonce,omitempty"`
	SignedInAt   time.Time `json:"signedInAt"`
	RefreshedAt  time.Time `json:"refreshedAt,omitzero"`
}

// ObtainedAt is when the record's access token was obtained: signed in or
// refreshed, whichever is later.
func (r *Record) ObtainedAt() time.Time {
	if r.RefreshedAt.After(r.SignedInAt) {
		return r.RefreshedAt
	}
	return r.SignedInAt
}

// Space is the space the record's scopes grant.
func (r *Record) Space() string { return SpaceOf(r.Scopes) }

// Header is the Authorization header value.
func (r *Record) Header() string { return "Bearer " + r.AccessToken }

// MarshalZerologObject logs the record with its tokens masked.
func (r *Record) MarshalZerologObject(e *zerolog.Event) {
	e.Str("profile", r.Profile).Str("subject", r.Subject).Str("accessToken", secret.Mask(r.AccessToken)).
		Time("expiresAt", r.Expiry).Bool("refreshToken", r.RefreshToken != "")
}

// Files keeps one file per profile in a directory of its own (0700; the
// files 0600, written whole).
type Files struct{ Dir string }

// DefaultDir is $XDG_STATE_HOME/signagent, else ~/.local/state/signagent.
func DefaultDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "signagent"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: no $XDG_STATE_HOME and no home directory: %w", ErrStore, err)
	}
	return filepath.Join(home, ".local", "state", "signagent"), nil
}

// A profile name is 1 to 64 of A-Z a-z 0-9 . _ -, not starting with one of
// the last three. (A loop rather than a regexp: it is checked on every
// proxied call, where the regexp was a measurable part of the work.)
func validProfile(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// CheckProfile refuses a profile name that is not a plain file name.
func CheckProfile(name string) error {
	if !validProfile(name) {
		return fmt.Errorf("%w: profile %q: use letters, digits, '.', '_' and '-' (at most 64, not starting with '.')", errdefs.ErrInvalidInput, name)
	}
	return nil
}

// Path is the profile's file.
func (s Files) Path(profile string) string { return filepath.Join(s.Dir, profile+".json") }

const maxRecord = 64 << 10

// Load reads a profile's record. A missing one wraps ErrSignIn; one that
// is not ours, readable by others or not a record wraps ErrStore.
func (s Files) Load(profile string) (*Record, error) {
	if err := CheckProfile(profile); err != nil {
		return nil, err
	}
	if err := s.checkDir(false); err != nil {
		return nil, err
	}
	p := s.Path(profile)
	st, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, noRecord{fmt.Errorf("%w: profile %q is not signed in; run signagent oidc login --profile %s", ErrSignIn, profile, profile)}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	if err := checkOwned(p, st, 0o600); err != nil {
		return nil, err
	}
	b, err := safefile.Read(p, maxRecord)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil || r.Version != recordVersion || r.Profile != profile ||
		r.AccessToken == "" || r.AuthURL == "" || r.ClientID == "" {
		return nil, fmt.Errorf("%w: %s is not a signagent OpenID Connect token record (corrupt or from another version); run signagent oidc logout --profile %s and sign in again", ErrStore, p, profile)
	}
	if bad := r.tokensProblem(); bad != "" {
		return nil, fmt.Errorf("%w: %s will not be used: %s; run signagent oidc logout --profile %s and sign in again", ErrStore, p, bad, profile)
	}
	return &r, nil
}

// Save writes a record atomically (a temporary file renamed over the old
// one), creating the directory 0700 when it is missing.
func (s Files) Save(r *Record) error {
	if err := CheckProfile(r.Profile); err != nil {
		return err
	}
	if err := s.checkDir(true); err != nil {
		return err
	}
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := safefile.Write(s.Path(r.Profile), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("%w: %w", ErrStore, err)
	}
	return nil
}

// Remove deletes a profile's record; it reports whether there was one.
func (s Files) Remove(profile string) (bool, error) {
	if err := CheckProfile(profile); err != nil {
		return false, err
	}
	err := os.Remove(s.Path(profile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrStore, err)
	}
	return true, nil
}

// checkDir refuses a store directory of another user or open to others;
// create makes a missing one (0700).
// Check says whether the store can be used: its directory, when it
// exists, is a directory of ours closed to other users (what /readyz
// reports).
func (s Files) Check() error { return s.checkDir(false) }

// Profiles lists the profiles the store holds a record for (valid
// names only), sorted; none when the directory is not there.
func (s Files) Profiles() ([]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if ok && e.Type().IsRegular() && CheckProfile(name) == nil {
			out = append(out, name)
		}
	}
	return out, nil
}

func (s Files) checkDir(create bool) error {
	st, err := os.Lstat(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return nil // Load reports the missing profile
		}
		if err := os.MkdirAll(s.Dir, 0o700); err != nil {
			return fmt.Errorf("%w: %w", ErrStore, err)
		}
		st, err = os.Lstat(s.Dir)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStore, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrStore, s.Dir)
	}
	return checkOwned(s.Dir, st, 0o700)
}

// checkOwned refuses what another user owns or others may use.
func checkOwned(path string, st fs.FileInfo, want fs.FileMode) error {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s belongs to uid %d, not to you (uid %d); signagent keeps each user's tokens apart", ErrStore, path, sys.Uid, os.Geteuid())
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%w: %s is a symbolic link", ErrStore, path)
	}
	if st.Mode().Perm()&^want != 0 {
		return fmt.Errorf("%w: %s has mode %04o, open to other users; run chmod %04o %s", ErrStore, path, st.Mode().Perm(), want, path)
	}
	return nil
}

// Lock takes the profile's refresh lock (an exclusive flock on
// <profile>.lock), waiting until ctx is done. One refresh at a time per
// profile, across processes.
func (s Files) Lock(ctx context.Context, profile string) (unlock func(), err error) {
	if err := CheckProfile(profile); err != nil {
		return nil, err
	}
	if err := s.checkDir(true); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, profile+".lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("%w: lock %s: %w", ErrStore, f.Name(), err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("%w: another signagent is refreshing profile %q and did not finish in time", ErrStore, profile)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
