package authz

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/errdefs"
)

// fake is an Authorizer handing out numbered values; a fake because the
// loop is what is tested here (the schemes' own tests use real services).
type fake struct {
	n        int
	rejected []string
	err      error
}

func (f *fake) Header(context.Context) (Header, error) {
	if f.err != nil {
		return Header{}, f.err
	}
	f.n++
	return Header{Value: "Bearer v" + string(rune('0'+f.n))}, nil
}
func (f *fake) Reject(v string)      { f.rejected = append(f.rejected, v) }
func (f *fake) Forget(time.Duration) {}
func (f *fake) Identity() string     { return "test" }
func (f *fake) String() string       { return "test identity" }
func answer(status int, code string) *http.Response {
	h := http.Header{}
	if code != "" {
		h.Set("X-Service-ErrorCode", code)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("body"))}
}

// A 401 drops the value and tries once more with a new one; a second 401
// is a RefusedError (Do) or passed on as it came (Retry).
func TestDoRetriesOnce(t *testing.T) {
	statuses := func(s ...int) func(context.Context, string) (*http.Response, error) {
		return func(_ context.Context, v string) (*http.Response, error) {
			st := s[0]
			s = s[1:]
			return answer(st, "Auth.Expired\x1b[31m"), nil
		}
	}
	f := &fake{}
	resp, err := Do(context.Background(), f, statuses(401, 200))
	if err != nil || resp.StatusCode != 200 || f.n != 2 || len(f.rejected) != 1 || f.rejected[0] != "Bearer v1" {
		t.Fatalf("resp %v err %v, %d values, rejected %v", resp, err, f.n, f.rejected)
	}

	f = &fake{}
	_, err = Do(context.Background(), f, statuses(401, 401))
	var re *RefusedError
	if !errors.As(err, &re) || !errors.Is(err, errdefs.ErrRefused) || re.Code != "Auth.Expired[31m" || !strings.Contains(err.Error(), "test identity") {
		t.Fatalf("err %v", err)
	}
	if f.n != 2 {
		t.Fatalf("%d values obtained, want 2", f.n)
	}

	f = &fake{}
	resp, retried, err := Retry(context.Background(), f, statuses(401, 401))
	if err != nil || resp.StatusCode != 401 || !retried {
		t.Fatalf("resp %v retried %v err %v", resp, retried, err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "body" {
		t.Fatal("the second 401's body is passed on unread")
	}

	f = &fake{}
	resp, err = Do(context.Background(), f, statuses(403))
	if err != nil || resp.StatusCode != 403 || f.n != 1 {
		t.Fatal("an answer other than 401 is not retried")
	}

	f = &fake{err: errdefs.New(errdefs.ErrSignIn, "sign in again")}
	if _, err := Do(context.Background(), f, statuses(200)); !errors.Is(err, errdefs.ErrSignIn) {
		t.Fatalf("the Authorizer's error is returned: %v", err)
	}
}

// The header's syntax, each form and each mistake: the error names what
// is wrong and never repeats a value.
func TestParseSelector(t *testing.T) {
	good := map[string]Selector{
		"oidc":                           {Scheme: SchemeOIDC},
		"oidc profile=robot":             {Scheme: SchemeOIDC, Profile: "robot"},
		"legacy login=alice@example.com": {Scheme: SchemeLegacy, By: "password", Login: "alice@example.com"},
		"legacy certificate":             {Scheme: SchemeLegacy, By: "certificate"},
		"trusted phone=9161234567 serviceUserId=7": {Scheme: SchemeLegacy, By: "sid", Credential: &Credential{Phone: "9161234567"}, ServiceUserID: "7"},
	}
	for text, want := range good {
		got, err := ParseSelector(text)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if (got.Credential == nil) != (want.Credential == nil) || got.ServiceUserID != want.ServiceUserID || got.Scheme != want.Scheme || got.By != want.By || got.Login != want.Login || got.Profile != want.Profile {
			t.Fatalf("%q: got %+v, want %+v", text, got, want)
		}
	}
	bad := map[string]string{
		"":                                   "missing",
		"kerberos user=secret-1":             `"user" is not a kerberos selector's key`,
		"Kerberos\u00e9 profile=x":           `is not a scheme's name`,
		"oidc profile=secret-1 profile=x":    `"profile" given twice`,
		"oidc profile=":                      `"profile" is empty`,
		"oidc certificate":                   "oidc takes only profile=NAME",
		"legacy login=secret-1 pin=secret-2": `"pin" is not a legacy selector's key`,
		"legacy":                             "legacy needs login=LOGIN or the word certificate",
		"trusted phone=secret-1":             "trusted needs one credential and serviceUserId=ID",
		"oidc profile=a\u202eb":              "too long or not printable",
		strings.Repeat("x", 1025):            "too long or not printable",
	}
	for text, want := range bad {
		_, err := ParseSelector(text)
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, errdefs.ErrInvalidInput) {
			t.Fatalf("%q: error %v, want one containing %q of kind invalid input", text, err, want)
		}
		if strings.Contains(err.Error(), "secret-") {
			t.Fatalf("%q: the error repeats a value: %v", text, err)
		}
	}
}

// Check: what each scheme and way in takes, for the JSON body and the
// CLI's flags, which have no syntax of their own to catch a mistake.
func TestSelectorCheck(t *testing.T) {
	cred := &Credential{Phone: "9161234567"}
	cases := []struct {
		sel  Selector
		want string // "" = accepted
	}{
		{Selector{Scheme: "oidc", Profile: "p"}, ""},
		{Selector{Scheme: "oidc", Login: "x"}, "does not take login"},
		{Selector{Scheme: "saml"}, ""}, // any other scheme takes a profile; whether it is served is Schemes' to say
		{Selector{Scheme: "saml", Login: "x"}, "does not take login"},
		{Selector{Scheme: "sa ml"}, "is not a scheme's name"},
		{Selector{Scheme: "legacy", By: "password"}, "needs login"},
		{Selector{Scheme: "legacy", By: "password", Login: "a", Sid: "s"}, "does not take sid"},
		{Selector{Scheme: "legacy", By: "certificate"}, ""},
		{Selector{Scheme: "legacy", By: "telepathy"}, "not a way to authenticate"},
		{Selector{Scheme: "legacy", By: "sid", Sid: "s"}, ""},
		{Selector{Scheme: "legacy", By: "sid", Sid: "s", Credential: cred}, "give sid or credential, not both"},
		{Selector{Scheme: "legacy", By: "sid", Credential: cred}, "by sid needs sid, or credential and serviceUserId"},
		{Selector{Scheme: "legacy", By: "sid", Credential: cred, ServiceUserID: "7"}, ""},
		{Selector{Scheme: "trusted", Credential: cred, ServiceUserID: "7"}.Normalize(), ""},
	}
	for _, c := range cases {
		err := c.sel.Check()
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Fatalf("%+v: error %v, want %q", c.sel, err, c.want)
		}
		if err != nil && (strings.HasPrefix(err.Error(), "invalid input") || !errors.Is(err, errdefs.ErrInvalidInput)) {
			t.Fatalf("%+v: error %q: kind invalid input, without its text", c.sel, err)
		}
	}
}

// fakeScheme is a Scheme handing out fakes, to test the list's lookup.
type fakeScheme struct{ name string }

func (s fakeScheme) Name() string                            { return s.name }
func (s fakeScheme) Authorizer(Selector) (Authorizer, error) { return &fake{}, nil }

// Schemes.Authorizer finds the scheme a selector names; a scheme not in
// the list is invalid input naming those that are; an Off scheme answers
// its error.
func TestSchemes(t *testing.T) {
	off := errdefs.New(errdefs.ErrNotConfigured, "b is not configured")
	l := Schemes{fakeScheme{"a"}, Off("b", off)}
	if a, err := l.Authorizer(Selector{Scheme: "a"}); err != nil || a == nil {
		t.Fatalf("scheme a: %v", err)
	}
	if _, err := l.Authorizer(Selector{Scheme: "b"}); err != off {
		t.Fatalf("an Off scheme answers its error, got %v", err)
	}
	_, err := l.Authorizer(Selector{Scheme: "c\x1b[2J"})
	if !errors.Is(err, errdefs.ErrInvalidInput) || !strings.Contains(err.Error(), "want a or b") || strings.Contains(err.Error(), "\x1b") {
		t.Fatalf("an unknown scheme: %v", err)
	}
	if got := strings.Join(l.Names(), ","); got != "a,b" {
		t.Fatalf("Names %q", got)
	}
}
