package business

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/signagent/signagent/errdefs"
)

// Organization is an entry of GetMyOrganizations (UpperCamelCase on the
// wire; unknown fields are ignored).
type Organization struct {
	OrgID     string `json:"OrgId"`
	Inn       string `json:"Inn"`
	Kpp       string `json:"Kpp"`
	FullName  string `json:"FullName"`
	ShortName string `json:"ShortName"`
	Boxes     []Box  `json:"Boxes"`
}

// Box is a box of an organization.
type Box struct {
	BoxID     string `json:"BoxId"`
	BoxIDGUID string `json:"BoxIdGuid"`
	Title     string `json:"Title"`
}

// Employee is GetMyEmployee's answer.
type Employee struct {
	User struct {
		UserID   string            `json:"UserId"`
		Login    string            `json:"Login"`
		FullName map[string]string `json:"FullName"`
	} `json:"User"`
	Permissions map[string]any `json:"Permissions"`
	Position    string         `json:"Position"`
}

// OrganizationsOption changes what GetMyOrganizations asks for.
type OrganizationsOption func(url.Values)

// AutoRegister asks GetMyOrganizations to register the user's
// organizations as it lists them (the service's autoRegister, which
// defaults to true at the service): it makes the user their
// administrator, and the service answers 409 after three such calls a
// day. Without it the call only reads.
func AutoRegister() OrganizationsOption {
	return func(q url.Values) { q.Set("autoRegister", "true") }
}

// GetMyOrganizations lists the organizations where the user has a box.
// It sends autoRegister=false (a read, with no side effect) unless
// AutoRegister is given.
func (c *Client) GetMyOrganizations(ctx context.Context, opts ...OrganizationsOption) ([]Organization, error) {
	q := url.Values{"autoRegister": {"false"}}
	for _, o := range opts {
		o(q)
	}
	var out struct {
		Organizations []Organization `json:"Organizations"`
	}
	if err := c.call(ctx, "GetMyOrganizations", q, "", &out); err != nil {
		return nil, err
	}
	return out.Organizations, nil
}

// GetMyEmployee is the user as an employee of the box's organization; a
// box that is not the user's is an *Error with status 403 naming it.
func (c *Client) GetMyEmployee(ctx context.Context, boxID string) (*Employee, error) {
	if strings.TrimSpace(boxID) == "" {
		return nil, fmt.Errorf("%w: GetMyEmployee needs a box id", errdefs.ErrInvalidInput)
	}
	var out Employee
	if err := c.call(ctx, "GetMyEmployee", url.Values{"boxId": {boxID}}, boxID, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
