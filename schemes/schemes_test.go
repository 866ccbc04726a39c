package schemes

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/legacy"
)

// TestOff: a scheme the settings leave out is off, with the command's
// reason when it gave one, else "not configured"; the list keeps its
// order and names.
func TestOff(t *testing.T) {
	why := errors.New("the token store is not readable")
	list, err := Build(nil, Settings{Off: map[string]error{authz.SchemeOIDC: why}}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range List() {
		want = append(want, e.Name)
	}
	if got := list.Names(); !slices.Equal(got, want) || len(got) < 2 || got[0] != authz.SchemeLegacy || got[1] != authz.SchemeOIDC {
		t.Fatalf("names %v, want the list's %v", got, want)
	}
	if _, err := list.Authorizer(authz.Selector{Scheme: authz.SchemeOIDC}); err != why {
		t.Fatalf("oidc off: %v, want the command's reason", err)
	}
	if _, err := list.Authorizer(authz.Selector{Scheme: authz.SchemeLegacy, By: "password", Login: "a"}); !errors.Is(err, errdefs.ErrNotConfigured) {
		t.Fatalf("legacy off: %v", err)
	}
}

// TestLegacyKeepsItsCache: a build whose legacy settings did not change
// keeps the token cache of the build it replaces (Deps.Was); changed
// settings, or passwords, get a new one; a client the settings cannot
// make is an error naming the scheme.
func TestLegacyKeepsItsCache(t *testing.T) {
	settings := func(key string, pws map[string]string) Settings {
		return Settings{Legacy: &LegacySettings{Client: &legacy.Config{APIURL: "https://api.example", DeveloperKey: key}, Passwords: pws}}
	}
	tokens := func(l authz.Schemes) *legacy.Tokens { return l[0].(*legacyScheme).Tokens }
	pws := map[string]string{"alice": "pw"}
	first, err := Build(nil, settings("testClient-0a1b2c3d4e", pws), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	same, err := Build(nil, settings("testClient-0a1b2c3d4e", map[string]string{"alice": "pw"}), Deps{Was: first})
	if err != nil || tokens(same) != tokens(first) {
		t.Fatalf("unchanged settings: a new cache (%v)", err)
	}
	for name, s := range map[string]Settings{
		"another key":      settings("testClient-9f8e7d6c5b", pws),
		"another password": settings("testClient-0a1b2c3d4e", map[string]string{"alice": "new"}),
	} {
		changed, err := Build(nil, s, Deps{Was: first})
		if err != nil || tokens(changed) == tokens(first) {
			t.Fatalf("%s: the old cache kept (%v)", name, err)
		}
	}
	if _, err := Build(nil, settings("", nil), Deps{}); !errors.Is(err, legacy.ErrDeveloperKey) || !strings.HasPrefix(err.Error(), "the legacy scheme: ") {
		t.Fatalf("no developer key: %v", err)
	}
}
