package business

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/signagent/signagent/emulator/directory"
	"github.com/signagent/signagent/emulator/kit"
	"github.com/signagent/signagent/internal/httpx"
)

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

// Route serves the business methods (paths matched
// case-insensitively, as the service does); ok is false for other paths.
func (s *Side) Route(w http.ResponseWriter, r *http.Request) (ok bool) {
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
		kit.PlainError(w, http.StatusMethodNotAllowed, kit.CodeBadRequest, "Method not allowed")
		return true
	}
	if s.env.TakeFault(w, r, call, kit.CodeJSON) {
		return true
	}
	user, ref := s.user(r)
	var answer any
	if ref == nil && call == "GetMyOrganizations" {
		if ref = s.register(user, r.URL.Query()); ref == nil {
			answer = map[string]any{"Organizations": s.organizationsOf(user)}
		}
	} else if ref == nil {
		answer, ref = s.employee(user, r.URL.Query().Get("boxId"))
	}
	if ref != nil {
		s.env.Reject(ref.Code)
		s.env.Log.Warn().Str("call", call).Int("status", ref.Status).Str("code", ref.Code).Str("reason", ref.Why).Msg("rejected")
		kit.PlainError(w, ref.Status, ref.Code, ref.Why)
		return true
	}
	kit.WriteJSON(w, http.StatusOK, answer)
	return true
}

// register models GetMyOrganizations' side effect: autoRegister defaults
// to true, and then the call registers the user's organizations (counted
// in Stats.Registrations), at most RegistrationsPerDay times a day per
// user on the emulator's clock; the next is refused 409.
func (s *Side) register(u *directory.User, q url.Values) *kit.Refusal {
	v, given := q.Get("autoRegister"), q.Has("autoRegister")
	switch {
	case given && strings.EqualFold(v, "false"):
		return nil
	case given && !strings.EqualFold(v, "true"):
		return kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "autoRegister must be true or false")
	}
	today := s.env.Now().UTC().Format(time.DateOnly)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.registrations[u.ID]
	if c.day != today {
		c = dayCount{day: today}
	}
	if c.n >= RegistrationsPerDay {
		return kit.Refuse(http.StatusConflict, CodeRegistrationLimit, "Organizations registration limit reached for today")
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
func (s *Side) employee(u *directory.User, boxID string) (any, *kit.Refusal) {
	n, ok := directory.NormalizeBoxID(boxID)
	if !ok {
		return nil, kit.Refuse(http.StatusBadRequest, kit.CodeBadRequest, "Could not get boxId from query param")
	}
	if s.boxByID(n) == nil {
		return nil, kit.Refuse(http.StatusNotFound, CodeBoxNotFound, fmt.Sprintf("Box [%s] is not found", httpx.Printable(boxID, 80)))
	}
	mine := false
	for _, b := range u.Boxes {
		m, _ := directory.NormalizeBoxID(b)
		mine = mine || m == n
	}
	if !mine {
		return nil, kit.Refuse(http.StatusForbidden, CodeBoxAccessDenied, fmt.Sprintf("Access to Box [%s] is denied", httpx.Printable(boxID, 80)))
	}
	return map[string]any{
		"User":        map[string]any{"UserId": u.ID, "Login": u.Login, "FullName": map[string]string{"FirstName": u.ID}},
		"Permissions": map[string]any{"UserDepartmentId": "00000000-0000-0000-0000-000000000000", "IsAdministrator": u.Admin, "DocumentAccessLevel": "AllDocuments"},
		"Position":    "Employee",
	}, nil
}

// boxByID finds a box by its normalized id.
func (s *Side) boxByID(n string) *directory.Box {
	for i := range s.dir.Organizations {
		for j := range s.dir.Organizations[i].Boxes {
			if m, _ := directory.NormalizeBoxID(s.dir.Organizations[i].Boxes[j].GUID); m == n {
				return &s.dir.Organizations[i].Boxes[j]
			}
		}
	}
	return nil
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
func (s *Side) organizationsOf(u *directory.User) []organizationJSON {
	mine := map[string]bool{}
	for _, b := range u.Boxes {
		n, _ := directory.NormalizeBoxID(b)
		mine[n] = true
	}
	out := []organizationJSON{}
	for _, o := range s.dir.Organizations {
		var boxes []boxJSON
		member := false
		for _, b := range o.Boxes {
			n, _ := directory.NormalizeBoxID(b.GUID)
			member = member || mine[n]
			boxes = append(boxes, boxJSON{BoxID: b.BoxID(), BoxIDGUID: strings.ToLower(b.GUID), Title: b.Title})
		}
		if member {
			out = append(out, organizationJSON{OrgID: o.ID, Inn: o.Inn, Kpp: o.Kpp, FullName: o.FullName, ShortName: o.ShortName, Boxes: boxes})
		}
	}
	return out
}
