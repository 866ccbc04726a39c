// Package business is the emulator's business API: GetMyOrganizations
// (with its registration side effect and daily limit) and GetMyEmployee,
// behind the access check of specification section 5.4 (the user behind
// the Authorization header, then the box check). Whose header is whose is
// the schemes' to say: the server gives the side one function per scheme.
package business

import (
	"net/http"
	"strings"
	"sync"

	"github.com/signagent/signagent/emulator/directory"
	"github.com/signagent/signagent/emulator/kit"
)

// Scheme is how the business side learns the user behind an
// Authorization header of one scheme: the header's prefix ("ServiceAuth
// ", "Bearer ") and the scheme's check, which answers the user's id or a
// refusal.
type Scheme struct {
	Prefix string
	User   func(header string) (string, *kit.Refusal)
}

// Stats counts what the side did.
type Stats struct {
	// Registrations counts GetMyOrganizations calls that registered the
	// user's organizations (autoRegister absent or true).
	Registrations int `json:"registrations"`
}

// Side is the business API.
type Side struct {
	env     *kit.Env
	dir     *directory.Directory
	schemes []Scheme

	mu            sync.Mutex
	registrations map[string]dayCount // registering GetMyOrganizations today, by user id
	stats         Stats
}

// New is the business API over dir, for callers of the schemes given.
func New(env *kit.Env, dir *directory.Directory, schemes ...Scheme) *Side {
	return &Side{env: env, dir: dir, schemes: schemes, registrations: map[string]dayCount{}}
}

// Stats returns a copy of the side's counts.
func (s *Side) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// user is the access check's first step (section 5.4): the user behind
// the Authorization header, or 401.
func (s *Side) user(r *http.Request) (*directory.User, *kit.Refusal) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, kit.Refuse(http.StatusUnauthorized, kit.CodeHTTPAuth, "Authorization header is missing")
	}
	for _, sc := range s.schemes {
		if strings.HasPrefix(h, sc.Prefix) {
			id, ref := sc.User(h)
			if ref != nil {
				return nil, ref
			}
			if u := s.dir.User(id); u != nil {
				return u, nil
			}
			return nil, kit.Refuse(http.StatusUnauthorized, kit.CodeInvalidAuthToken, "Invalid auth token")
		}
	}
	return nil, kit.Refuse(http.StatusUnauthorized, kit.CodeHTTPAuth, "Unsupported authorization scheme")
}
