package service

import (
	"context"
	"fmt"
	"net/url"
	"strings"
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

// GetMyOrganizations lists the organizations where the user has a box.
func (c *Client) GetMyOrganizations(ctx context.Context) ([]Organization, error) {
	var out struct {
		Organizations []Organization `json:"Organizations"`
	}
	if err := c.call(ctx, "GetMyOrganizations", nil, "", &out); err != nil {
		return nil, err
	}
	return out.Organizations, nil
}

// GetMyEmployee is the user as an employee of the box's organization; a
// box that is not the user's is an *Error with status 403 naming it.
func (c *Client) GetMyEmployee(ctx context.Context, boxID string) (*Employee, error) {
	if strings.TrimSpace(boxID) == "" {
		return nil, fmt.Errorf("%w: GetMyEmployee needs a box id", ErrInvalidInput)
	}
	var out Employee
	if err := c.call(ctx, "GetMyEmployee", url.Values{"boxId": {boxID}}, boxID, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
