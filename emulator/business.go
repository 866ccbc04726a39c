package emulator

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Organization is an organization of the service, with its boxes.
type Organization struct {
	ID        string `yaml:"id"`
	Inn       string `yaml:"inn"`
	Kpp       string `yaml:"kpp"`
	FullName  string `yaml:"fullName"`
	ShortName string `yaml:"shortName"`
	Boxes     []Box  `yaml:"boxes"`
}

// Box is a box of an organization: a GUID, and the domain of its older
// form <32 hex digits>@<domain>.
type Box struct {
	GUID   string `yaml:"guid"`
	Domain string `yaml:"domain"`
	Title  string `yaml:"title"`
}

// BoxID is the box's older form of id.
func (b Box) BoxID() string { return strings.ReplaceAll(b.GUID, "-", "") + "@" + b.Domain }

// normalizeBoxID reads a box id given as a GUID (any case, with or without
// dashes or braces) or as <32 hex digits>@<domain>, and returns its 32
// lower-case hex digits.
func normalizeBoxID(id string) (string, bool) {
	id = strings.TrimSpace(id)
	if at := strings.IndexByte(id, '@'); at >= 0 {
		if at+1 == len(id) {
			return "", false
		}
		id = id[:at]
	}
	id = strings.ToLower(strings.NewReplacer("-", "", "{", "", "}", "").Replace(id))
	if b, err := hex.DecodeString(id); err != nil || len(b) != 16 {
		return "", false
	}
	return id, true
}

func (cfg *Config) checkOrganizations() error {
	boxes := map[string]bool{}
	for i := range cfg.Organizations {
		o := &cfg.Organizations[i]
		if o.ID == "" || o.FullName == "" {
			return fmt.Errorf("organization %d: give id and fullName", i+1)
		}
		for j := range o.Boxes {
			b := &o.Boxes[j]
			n, ok := normalizeBoxID(b.GUID)
			if !ok || strings.Contains(b.GUID, "@") {
				return fmt.Errorf("organization %q: box %q: guid must be a GUID", o.ID, b.GUID)
			}
			if boxes[n] {
				return fmt.Errorf("organization %q: box %q appears twice", o.ID, b.GUID)
			}
			boxes[n] = true
			if b.Domain == "" {
				b.Domain = "box.example"
			}
		}
	}
	for _, u := range cfg.Users {
		for _, b := range u.Boxes {
			if n, ok := normalizeBoxID(b); !ok || !boxes[n] {
				return fmt.Errorf("user %q: box %q is not a box of any organization", u.ID, b)
			}
		}
	}
	return nil
}

// Codes of the box check (the emulator's own; the wire notes give the
// texts).
const (
	CodeBoxAccessDenied = "Http.Forbidden"
	CodeBoxNotFound     = "Http.NotFound"
	// CodeRegistrationLimit answers a registering GetMyOrganizations past
	// the day's limit.
	CodeRegistrationLimit = "Http.Conflict"
)

// RegistrationsPerDay is how many registering GetMyOrganizations calls
// (autoRegister absent or true) a user may make in a day; the next is
// answered 409 (wire notes, "Business methods").
const RegistrationsPerDay = 3

// businessRoute serves the business methods (paths matched
// case-insensitively, as the service does); ok is false for other paths.
func (s *Server) businessRoute(w http.ResponseWriter, r *http.Request) (ok bool) {
	var call string
	methods := []string{http.MethodGet, http.MethodPost}
	switch {
	case strings.EqualFold(r.URL.Path, "/GetMyOrganizations"):
		call = "GetMyOrganizations"
	case strings.EqualFold(r.URL.Path, "/GetMyEmployee"):
		call, methods = "GetMyEmployee", methods[:1]
	default:
		return false
	}
	if !slices.Contains(methods, r.Method) {
		w.Header().Set("Allow", strings.Join(methods, ", "))
		plainError(w, http.StatusMethodNotAllowed, CodeBadRequest, "Method not allowed")
		return true
	}
	if s.takeFault(w, r, call) {
		return true
	}
	user, ref := s.businessUser(r)
	var answer any
	if ref == nil && call == "GetMyOrganizations" {
		if ref = s.register(user, r.URL.Query()); ref == nil {
			answer = map[string]any{"Organizations": s.organizationsOf(user)}
		}
	} else if ref == nil {
		answer, ref = s.employee(user, r.URL.Query().Get("boxId"))
	}
	if ref != nil {
		s.mu.Lock()
		s.stats.Rejections[ref.code]++
		s.mu.Unlock()
		s.log.Warn().Str("call", call).Int("status", ref.status).Str("code", ref.code).Str("reason", ref.why).Msg("rejected")
		plainError(w, ref.status, ref.code, ref.why)
		return true
	}
	writeJSON(w, http.StatusOK, answer)
	return true
}

// register models GetMyOrganizations' side effect: autoRegister defaults
// to true, and then the call registers the user's organizations (counted
// in Stats.Registrations), at most RegistrationsPerDay times a day per
// user on the emulator's clock; the next is refused 409.
func (s *Server) register(u *User, q url.Values) *refusal {
	v, given := q.Get("autoRegister"), q.Has("autoRegister")
	switch {
	case given && strings.EqualFold(v, "false"):
		return nil
	case given && !strings.EqualFold(v, "true"):
		return refuse(http.StatusBadRequest, CodeBadRequest, "autoRegister must be true or false")
	}
	today := s.clock().UTC().Format(time.DateOnly)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.registrations[u.ID]
	if c.day != today {
		c = dayCount{day: today}
	}
	if c.n >= RegistrationsPerDay {
		return refuse(http.StatusConflict, CodeRegistrationLimit, "Organizations registration limit reached for today")
	}
	c.n++
	s.registrations[u.ID] = c
	s.stats.Registrations++
	return nil
}

// dayCount is a count on one day (YYYY-MM-DD, UTC).
type dayCount struct {
	day string
	n   int
}

// employee is GetMyEmployee: the box check of section 5.4 (steps 2 and 3)
// and the user as an employee of the box's organization.
func (s *Server) employee(u *User, boxID string) (any, *refusal) {
	n, ok := normalizeBoxID(boxID)
	if !ok {
		return nil, refuse(http.StatusBadRequest, CodeBadRequest, "Could not get boxId from query param")
	}
	if s.boxByID(n) == nil {
		return nil, refuse(http.StatusNotFound, CodeBoxNotFound, fmt.Sprintf("Box [%s] is not found", printableID(boxID)))
	}
	mine := false
	for _, b := range u.Boxes {
		m, _ := normalizeBoxID(b)
		mine = mine || m == n
	}
	if !mine {
		return nil, refuse(http.StatusForbidden, CodeBoxAccessDenied, fmt.Sprintf("Access to Box [%s] is denied", printableID(boxID)))
	}
	return map[string]any{
		"User":        map[string]any{"UserId": u.ID, "Login": u.Login, "FullName": map[string]string{"FirstName": u.ID}},
		"Permissions": map[string]any{"UserDepartmentId": "00000000-0000-0000-0000-000000000000", "IsAdministrator": u.Admin, "DocumentAccessLevel": "AllDocuments"},
		"Position":    "Employee",
	}, nil
}

// printableID keeps a box id the caller sent fit for an error text.
func printableID(id string) string {
	id = strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' {
			return -1
		}
		return r
	}, strings.TrimSpace(id))
	if len(id) > 80 {
		id = id[:80]
	}
	return id
}

// boxByID finds a box by its normalized id.
func (s *Server) boxByID(n string) *Box {
	for i := range s.cfg.Organizations {
		for j := range s.cfg.Organizations[i].Boxes {
			if m, _ := normalizeBoxID(s.cfg.Organizations[i].Boxes[j].GUID); m == n {
				return &s.cfg.Organizations[i].Boxes[j]
			}
		}
	}
	return nil
}

// businessUser is the access check's first step (section 5.4): the user
// behind the Authorization header, or 401.
func (s *Server) businessUser(r *http.Request) (*User, *refusal) {
	h := r.Header.Get("Authorization")
	var id string
	var ref *refusal
	switch {
	case h == "":
		return nil, refuse(http.StatusUnauthorized, CodeHTTPAuth, "Authorization header is missing")
	case strings.HasPrefix(h, "ServiceAuth "):
		id, ref = s.legacyUser(h)
	case strings.HasPrefix(h, "Bearer "):
		g, ok := s.bearer(h)
		if !ok {
			return nil, refuse(http.StatusUnauthorized, CodeInvalidAuthToken, "Invalid or expired access token")
		}
		id = g.user
	default:
		return nil, refuse(http.StatusUnauthorized, CodeHTTPAuth, "Unsupported authorization scheme")
	}
	if ref != nil {
		return nil, ref
	}
	for i := range s.cfg.Users {
		if s.cfg.Users[i].ID == id {
			return &s.cfg.Users[i], nil
		}
	}
	return nil, refuse(http.StatusUnauthorized, CodeInvalidAuthToken, "Invalid auth token")
}

type boxJSON struct {
	BoxID     string `json:"BoxId"`
	BoxIDGUID string `json:"BoxIdGuid"`
	Title     string `json:"Title"`
}

type organizationJSON struct {
	OrgID     string    `json:"OrgId"`
	Inn       string    `json:"Inn"`
	Kpp       string    `json:"Kpp,omitempty"`
	FullName  string    `json:"FullName"`
	ShortName string    `json:"ShortName,omitempty"`
	Boxes     []boxJSON `json:"Boxes"`
}

// organizationsOf lists the organizations where u may use a box, with
// their boxes.
func (s *Server) organizationsOf(u *User) []organizationJSON {
	mine := map[string]bool{}
	for _, b := range u.Boxes {
		n, _ := normalizeBoxID(b)
		mine[n] = true
	}
	out := []organizationJSON{}
	for _, o := range s.cfg.Organizations {
		var boxes []boxJSON
		member := false
		for _, b := range o.Boxes {
			n, _ := normalizeBoxID(b.GUID)
			member = member || mine[n]
			boxes = append(boxes, boxJSON{BoxID: b.BoxID(), BoxIDGUID: strings.ToLower(b.GUID), Title: b.Title})
		}
		if member {
			out = append(out, organizationJSON{OrgID: o.ID, Inn: o.Inn, Kpp: o.Kpp, FullName: o.FullName, ShortName: o.ShortName, Boxes: boxes})
		}
	}
	return out
}
