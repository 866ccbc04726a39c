package emulator

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

var otherOrg = Organization{ID: "org-2", FullName: "Someone Else JSC", Boxes: []Box{{GUID: otherBox}}}

func employee(t *testing.T, base, auth, boxID string, withParam bool) answer {
	t.Helper()
	u := base + "/GetMyEmployee"
	if withParam {
		u += "?boxId=" + url.QueryEscape(boxID)
	}
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Accept", "application/json")
	return do(t, req)
}

// TestGetMyEmployee: the box check of section 5.4 with both schemes: 401
// before anything else, 400 without a box id, 404 for a box that does not
// exist, 403 for another's box, 200 for the user's own in either form.
func TestGetMyEmployee(t *testing.T) {
	t.Parallel()
	lb := newLegacyBed(t, false)
	tok := lb.post(t, "/V3/Authenticate?type=password", devHeader, "application/json",
		[]byte(`{"login":"alice@example.com","password":"correct horse"}`)).token(t)
	ib := newIDPBed(t, nil)
	access := ib.accessToken(t)
	for name, tc := range map[string]struct{ base, auth, bad, badCode string }{
		"legacy": {lb.s.URL(), authHeader(testDevKey, tok), authHeader("testClient-unknown", tok), CodeHTTPAuth},
		"oidc":   {ib.s.URL(), "Bearer " + access, "Bearer " + strings.Repeat("0", 64), CodeInvalidAuthToken},
	} {
		t.Run(name, func(t *testing.T) {
			hex := strings.ReplaceAll(boxGUID, "-", "")
			for _, id := range []string{boxGUID, strings.ToUpper(boxGUID), hex + "@box.example", "{" + boxGUID + "}"} {
				a := employee(t, tc.base, tc.auth, id, true)
				var got struct {
					User     struct{ UserID, Login string } `json:"User"`
					Position string
				}
				if a.status != 200 || json.Unmarshal(a.body, &got) != nil || got.User.UserID != "alice" || got.User.Login != "alice@example.com" {
					t.Fatalf("%s: %d %s", id, a.status, a.body)
				}
			}
			employee(t, tc.base, "", boxGUID, true).want(t, 401, CodeHTTPAuth, "missing")
			employee(t, tc.base, tc.bad, boxGUID, true).want(t, 401, tc.badCode, "")
			employee(t, tc.base, tc.auth, "", false).want(t, 400, CodeBadRequest, "Could not get boxId from query param")
			employee(t, tc.base, tc.auth, "not-a-box", true).want(t, 400, CodeBadRequest, "Could not get boxId from query param")
			employee(t, tc.base, tc.auth, "00000000-0000-0000-0000-000000000001", true).want(t, 404, CodeBoxNotFound, "not found")
			employee(t, tc.base, tc.auth, otherBox, true).want(t, 403, CodeBoxAccessDenied, "Access to Box ["+otherBox+"] is denied")
			// 401 comes first: a bad token on another's box is 401, not 403.
			employee(t, tc.base, tc.bad, otherBox, true).want(t, 401, tc.badCode, "")
		})
	}
}

// accessToken signs alice in with the code flow and returns her access
// token.
func (b idpBed) accessToken(t *testing.T) string {
	t.Helper()
	verifier := strings.Repeat("v", 43)
	_, back := b.signIn(t, authQuery(verifier), "alice@example.com", "correct horse", "allow")
	exchange := url.Values{"grant_type": {"authorization_code"}, "code": {back.Get("code")}, "redirect_uri": {redirectURI}, "code_verifier": {verifier}}
	st, tok, _ := b.form(t, "/connect/token", creds(exchange), false)
	if st != 200 {
		t.Fatalf("token: %d %v", st, tok)
	}
	return tok["access_token"].(string)
}
