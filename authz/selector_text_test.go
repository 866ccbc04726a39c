package authz

import (
	"reflect"
	"testing"
)

// Text writes what ParseSelector reads back as the same selector, and
// refuses what the header cannot carry.
func TestSelectorText(t *testing.T) {
	for _, s := range []Selector{
		{Scheme: SchemeOIDC},
		{Scheme: SchemeOIDC, Profile: "work"},
		{Scheme: SchemeLegacy, By: "certificate"},
		{Scheme: SchemeLegacy, By: "password", Login: "alice@example.com"},
		{Scheme: SchemeLegacy, By: "sid", Credential: &Credential{SNILS: "11223344595"}, ServiceUserID: "crm-42"},
		{Scheme: SchemeLegacy, By: "sid", Credential: &Credential{Phone: "9161234567"}, ServiceUserID: "crm-42"},
		{Scheme: "robot", Profile: "r2"},
	} {
		text, ok := s.Text()
		if !ok {
			t.Fatalf("%+v: no text", s)
		}
		back, err := ParseSelector(text)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if !reflect.DeepEqual(back, s.Normalize()) {
			t.Errorf("%q read back as %+v, want %+v", text, back, s)
		}
	}
	for _, s := range []Selector{
		{Scheme: SchemeLegacy, By: "sid", Sid: "secret-sid"},
		{Scheme: SchemeLegacy, By: "password", Login: "two words"},
		{Scheme: SchemeLegacy, By: "password"},
	} {
		if text, ok := s.Text(); ok {
			t.Errorf("%+v: text %q, want none", s, text)
		}
	}
}
