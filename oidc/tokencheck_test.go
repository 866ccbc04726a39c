package oidc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/store/storetest"
)

// hostile is an identity provider that answers its token endpoint's
// successful answers with edit's fields instead of its own: the emulator
// issues good tokens, these are what a hostile provider could answer.
type hostile struct {
	base http.RoundTripper
	edit map[string]string
	// raw, when set, replaces the JSON string "RAW" in the answer: bytes
	// that json.Marshal would not write (0xff).
	raw string
}

func (h hostile) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.base.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, "/connect/token") || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	for k, v := range h.edit {
		m[k] = v
	}
	body, _ = json.Marshal(m)
	if h.raw != "" {
		body = bytes.Replace(body, []byte(`"RAW"`), []byte(`"`+h.raw+`"`), 1)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp, nil
}

// leak marks the hostile tokens: no error may repeat it.
const leak = "leakmenot"

var hostileAnswers = []struct {
	name string
	h    hostile
	want string // in the error
}{
	{"access token with CR LF", hostile{edit: map[string]string{"access_token": leak + "\r\nX-Injected: 1"}},
		"an access_token that is not an RFC 6750 bearer token (it holds a control byte (0x0d) at byte 9)"},
	{"access token with NUL", hostile{edit: map[string]string{"access_token": leak + "\x00"}}, "a control byte (0x00) at byte 9"},
	{"access token with a space", hostile{edit: map[string]string{"access_token": leak + " x"}}, "a space at byte 9"},
	{"access token with UTF-8", hostile{edit: map[string]string{"access_token": leak + "é"}}, "a byte above 0x7f (0xc3) at byte 9"},
	{"access token with a raw 0xff", hostile{edit: map[string]string{"access_token": "RAW"}, raw: leak + "\xff"},
		"a byte above 0x7f (0xef) at byte 9"}, // JSON reads 0xff as U+FFFD
	{"token type with CR LF", hostile{edit: map[string]string{"token_type": "Bearer\r\nX-Injected: " + leak}},
		"a token_type that is not an HTTP token (it holds a control byte (0x0d) at byte 6)"},
	{"token type with a space", hostile{edit: map[string]string{"token_type": "Bearer " + leak}}, "a token_type that is not an HTTP token (it holds a space at byte 6)"},
}

// checkRefused: one line, the provider's answer refused as unusable,
// naming the step and what is wrong, never the token.
func checkRefused(t *testing.T, err error, step, want string) {
	t.Helper()
	var te *httpx.TransportError
	if !errors.As(err, &te) || !errors.Is(err, errdefs.ErrUnreachable) || te.Step != step {
		t.Fatalf("err = %v, want a TransportError of step %s", err, step)
	}
	msg := err.Error()
	if !strings.Contains(msg, want) || !strings.Contains(msg, "it was not used") || strings.Contains(msg, leak) ||
		strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
		t.Fatalf("err = %q, want one printable line with %q and without the token", msg, want)
	}
}

// TestHostileTokenAnswer: a provider answering an access token or a
// token_type that could not go into a request's head as it is (a CR LF
// would add a header to every business call of the profile) is refused
// on every way a token answer is taken: device flow, code flow, a
// sign-in with a given refresh token and a refresh, which stores nothing.
func TestHostileTokenAnswer(t *testing.T) {
	b := newBed(t, nil)
	good := b.client(t, nil)
	signedIn := deviceLogin(t, b, good)
	signedIn.Profile = "p"
	for _, tc := range hostileAnswers {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := tc.h
			h.base = b
			c := b.client(t, func(cfg *Config) { cfg.HTTPClient = &http.Client{Transport: h} })

			t.Run("device", func(t *testing.T) {
				t.Parallel()
				rec, err := deviceApproved(t, b, c)
				if rec != nil {
					t.Fatal("a record was made")
				}
				checkRefused(t, err, "token (device_code)", tc.want)
			})
			t.Run("code", func(t *testing.T) {
				t.Parallel()
				r, err := c.StartCode(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				rec, err := c.FinishCode(t.Context(), r, b.signIn(t, r.URL, "allow"))
				if rec != nil {
					t.Fatal("a record was made")
				}
				checkRefused(t, err, "token (authorization_code)", tc.want)
			})
			t.Run("refresh token given", func(t *testing.T) {
				t.Parallel()
				rec, err := c.SignInWithRefreshToken(t.Context(), signedIn.RefreshToken)
				if rec != nil {
					t.Fatal("a record was made")
				}
				checkRefused(t, err, "refresh", tc.want)
			})
			t.Run("refresh", func(t *testing.T) {
				t.Parallel()
				s := Files{Dir: filepath.Join(t.TempDir(), "state")}
				stale := *signedIn
				stale.SignedInAt, stale.Expiry = time.Now().Add(-2*time.Hour).UTC(), time.Now().Add(-time.Hour).UTC()
				if err := s.Save(&stale); err != nil {
					t.Fatal(err)
				}
				before, _ := os.ReadFile(s.Path("p"))
				var results []string
				tk := &Tokens{Store: s, Client: func(*Record) (*Client, error) { return c, nil },
					OnRefresh: func(_, result string) { results = append(results, result) }}
				rec, _, err := tk.Token(t.Context(), "p")
				if rec != nil {
					t.Fatal("a record was handed out")
				}
				checkRefused(t, err, "refresh", tc.want)
				if after, _ := os.ReadFile(s.Path("p")); !bytes.Equal(before, after) {
					t.Fatal("the store's record changed")
				}
				if strings.Join(results, ",") != "error" {
					t.Fatalf("refresh results %v", results)
				}
			})
		})
	}
}

// TestStoredRecordTokenChecked: a record read back from a store (a file
// edited by hand or by something else of the user's, a shared store's
// value written with its key) is checked as a provider's answer is: one
// line naming the file or store and the fix, never the token.
func TestStoredRecordTokenChecked(t *testing.T) {
	t.Parallel()
	bad := map[string]func(*Record){
		"access token with CR LF":  func(r *Record) { r.AccessToken = leak + "\r\nX-Injected: 1" },
		"access token with NUL":    func(r *Record) { r.AccessToken = leak + "\x00" },
		"access token with 8-bit":  func(r *Record) { r.AccessToken = leak + "\u00e9" },
		"access token with space":  func(r *Record) { r.AccessToken = leak + " x" },
		"token type with CR LF":    func(r *Record) { r.TokenType = "Bearer\r\nX-Injected: " + leak },
		"token type with a space":  func(r *Record) { r.TokenType = "Bearer " + leak },
		"access token with ' = '":  func(r *Record) { r.AccessToken = leak + "=x" },
		"access token with comma":  func(r *Record) { r.AccessToken = leak + ",x" },
		"access token with quotes": func(r *Record) { r.AccessToken = `"` + leak + `"` },
	}
	oneLine := func(t *testing.T, err error, kind error, want string) {
		t.Helper()
		msg := fmt.Sprint(err)
		if !errors.Is(err, kind) || !strings.Contains(msg, want) || strings.Contains(msg, leak) ||
			strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
			t.Fatalf("err = %q", msg)
		}
	}
	file := Files{Dir: filepath.Join(t.TempDir(), "state")}
	for _, st := range []struct {
		name string
		s    Records
		kind error
		want string
	}{
		{"file", file, ErrStore, file.Path("p") + " will not be used: its "},
		{"shared", sharedRecords(t, storetest.Start(t).URL(), 1), ErrSignIn, `profile "p"'s record in the shared store will not be used: its `},
	} {
		t.Run(st.name, func(t *testing.T) {
			for name, edit := range bad {
				r := testRecord("p")
				edit(r)
				if err := st.s.Save(r); err != nil {
					t.Fatal(err)
				}
				_, err := st.s.Load("p")
				oneLine(t, err, st.kind, st.want)
				t.Logf("%s: %v", name, err)
			}
			ok := testRecord("p")
			ok.TokenType = "" // a record without one: Bearer
			if err := st.s.Save(ok); err != nil {
				t.Fatal(err)
			}
			if _, err := st.s.Load("p"); err != nil {
				t.Fatalf("a good record: %v", err)
			}
		})
	}
}
