package trusted

import (
	"net/url"
	"strings"
	"testing"
	"unicode"
)

func TestParseChallenge(t *testing.T) {
	for _, body := range []string{
		`{"Key": "FE43", "Link": {"Rel": "Send key to this link", "Href": "https://h/auth/v5.16/approve-truster?id=1&key=FE43"}}`,
		`{"key": "FE43", "link": {"rel": "r", "href": "h"}, "Extra": 1}`,
		`{"KEY": "FE43"}`,
	} {
		c, err := ParseChallenge([]byte(body))
		if err != nil || c.Key != "FE43" {
			t.Errorf("ParseChallenge(%s) = %+v, %v", body, c, err)
		}
	}
	for _, bad := range []string{``, `{}`, `{"Key": ""}`, `[1]`, `{"Key": 5}`, `<html>`} {
		if _, err := ParseChallenge([]byte(bad)); err == nil {
			t.Errorf("ParseChallenge(%q) accepted", bad)
		}
	}
}

func TestParseSid(t *testing.T) {
	for _, tc := range []struct{ ct, body, want string }{
		{"application/json;charset=UTF-8", `{"Sid": "AAAA"}`, "AAAA"},
		{"application/json", `{"sid": "AAAA", "RefreshToken": "x"}`, "AAAA"},
		{"text/plain; charset=utf-8", "AAAA\n", "AAAA"},
		{"text/plain", `"AAAA"`, "AAAA"},
		{"", "AAAA", "AAAA"},
	} {
		got, err := ParseSid(tc.ct, []byte(tc.body))
		if err != nil || got != tc.want {
			t.Errorf("ParseSid(%q, %q) = %q, %v", tc.ct, tc.body, got, err)
		}
	}
	for _, bad := range [][2]string{{"application/json", `{}`}, {"text/plain", ""}, {"text/plain", "A B"}, {"application/json", "nope"}} {
		if _, err := ParseSid(bad[0], []byte(bad[1])); err == nil {
			t.Errorf("ParseSid(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

func TestParseErrorCode(t *testing.T) {
	for body, want := range map[string]string{
		`{"Code": "UserNotFound"}`:                    "UserNotFound",
		`{"code": "InvalidApiKey", "x": 1}`:           "InvalidApiKey",
		`{"Code": "has space"}`:                       "",
		`{"Code": "` + strings.Repeat("A", 65) + `"}`: "",
		`not json`: "",
		``:         "",
	} {
		if got := ParseErrorCode([]byte(body)); got != want {
			t.Errorf("ParseErrorCode(%q) = %q, want %q", body, got, want)
		}
	}
}

func TestQueryAndMask(t *testing.T) {
	q := query([2]string{"apiKey", "0F6C2E5B-9D4A"}, [2]string{"timestamp", "16.08.2016 14:03:10"}, [2]string{"phone", "9161234567"})
	if q != "apiKey=0F6C2E5B-9D4A&timestamp=16.08.2016%2014%3A03%3A10&phone=9161234567" {
		t.Fatalf("query %q", q)
	}
	u, _ := url.Parse("https://h/auth/v5.16/x?" + q + "&key=FE43FE43FE43FE43")
	got := MaskURL(u)
	if got != "https://h/auth/v5.16/x?apiKey=0F6C…(13)&timestamp=16.08.2016%2014%3A03%3A10&phone=******4567&key=FE43…(16)" {
		t.Fatalf("masked %q", got)
	}
}

func FuzzParseChallenge(f *testing.F) {
	f.Add([]byte(`{"Key": "FE43", "Link": {"Rel": "r", "Href": "h"}}`))
	f.Add([]byte(`{"key": ""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseChallenge(b)
		if err == nil && strings.TrimSpace(c.Key) == "" {
			t.Fatal("accepted an empty Key")
		}
	})
}

func FuzzParseSid(f *testing.F) {
	f.Add("application/json", []byte(`{"Sid": "AAAA"}`))
	f.Add("text/plain", []byte("AAAA\n"))
	f.Fuzz(func(t *testing.T, ct string, b []byte) {
		sid, err := ParseSid(ct, b)
		if err == nil && (strings.TrimSpace(sid) == "") {
			t.Fatal("accepted an empty Sid")
		}
	})
}

func FuzzParseErrorCode(f *testing.F) {
	f.Add([]byte(`{"Code": "UserNotFound"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		code := ParseErrorCode(b)
		if len(code) > 64 || strings.ContainsFunc(code, func(r rune) bool { return unicode.IsSpace(r) || r > unicode.MaxASCII }) {
			t.Fatalf("code %q escapes the identifier rule", code)
		}
	})
}
