// Package tokeninfo is what a PKCS#11 module says of the tokens in its
// slots (TokenInfo, read by ReadTokens) and the choice of one of them
// (TokenSelector, ChooseToken), with the errors that name the tokens there
// and how to pick one. It needs nothing of package pkcs11, which imports it.
package tokeninfo

import (
	"fmt"
	"strings"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/uri"
)

// Lister is the part of a module's interface (pkcs11.Backend) that reads
// its slots' tokens.
type Lister interface {
	GetSlotList(tokenPresent bool) ([]uint, error)
	GetTokenInfo(slot uint) (p11.TokenInfo, error)
}

// TokenInfo describes a token the module sees.
type TokenInfo struct {
	Slot         uint     `json:"slot"`
	Label        string   `json:"label"`
	Serial       string   `json:"serial"`
	Manufacturer string   `json:"manufacturer"`
	Model        string   `json:"model"`
	Flags        []string `json:"flags"`
	Initialized  bool     `json:"initialized"`

	Raw p11.TokenInfo `json:"-"` // as the module gave it
}

// ReadTokens reads the tokens present in the module's slots, in a call
// the caller makes (pkcs11.WithModule).
func ReadTokens(m Lister) ([]TokenInfo, error) {
	slots, err := m.GetSlotList(true)
	if err != nil {
		return nil, tokenerr.Classify("list the module's slots", err)
	}
	var out []TokenInfo
	for _, s := range slots {
		ti, err := m.GetTokenInfo(s)
		if err != nil {
			return nil, tokenerr.Classify(fmt.Sprintf("read the token in slot %d", s), err)
		}
		out = append(out, TokenInfo{
			Slot:         s,
			Label:        strings.TrimRight(ti.Label, " \x00"),
			Serial:       strings.TrimRight(ti.SerialNumber, " \x00"),
			Manufacturer: strings.TrimRight(ti.ManufacturerID, " \x00"),
			Model:        strings.TrimRight(ti.Model, " \x00"),
			Flags:        tokenFlags(ti.Flags),
			Initialized:  ti.Flags&p11.CKF_TOKEN_INITIALIZED != 0,
			Raw:          ti,
		})
	}
	return out, nil
}

func tokenFlags(f uint) []string {
	var out []string
	for _, x := range []struct {
		bit  uint
		name string
	}{
		{p11.CKF_TOKEN_INITIALIZED, "initialized"},
		{p11.CKF_LOGIN_REQUIRED, "login-required"},
		{p11.CKF_USER_PIN_INITIALIZED, "pin-initialized"},
		{p11.CKF_PROTECTED_AUTHENTICATION_PATH, "pin-pad"},
		{p11.CKF_WRITE_PROTECTED, "write-protected"},
		{p11.CKF_USER_PIN_COUNT_LOW, "pin-count-low"},
		{p11.CKF_USER_PIN_FINAL_TRY, "pin-final-try"},
		{p11.CKF_USER_PIN_LOCKED, "pin-locked"},
		{p11.CKF_HW_SLOT, "hardware"},
	} {
		if f&x.bit != 0 {
			out = append(out, x.name)
		}
	}
	return out
}

// TokenSelector picks one token.
type TokenSelector struct {
	Label  string
	Serial string
	// Slot, when HasSlot, is the slot the token must be in (slot-id= of a
	// pkcs11: URI).
	Slot    uint
	HasSlot bool
}

// String names the token the selector asks for (label, serial), as errors show it.
func (s TokenSelector) String() string {
	if s.HasSlot {
		t := s
		t.HasSlot = false
		if t.Label == "" && t.Serial == "" {
			return fmt.Sprintf("in slot %d", s.Slot)
		}
		return fmt.Sprintf("%s in slot %d", t, s.Slot)
	}
	switch {
	case s.Label != "" && s.Serial != "":
		return fmt.Sprintf("label %q serial %q", s.Label, s.Serial)
	case s.Label != "":
		return fmt.Sprintf("%q", s.Label)
	case s.Serial != "":
		return fmt.Sprintf("with serial %q", s.Serial)
	}
	return "(any)"
}

func (s TokenSelector) matches(t TokenInfo) bool {
	return (s.Label == "" || s.Label == t.Label) && (s.Serial == "" || s.Serial == t.Serial) && (!s.HasSlot || s.Slot == t.Slot)
}

// ChooseToken returns the one token sel matches, or the only initialized token
// when sel is empty.
func ChooseToken(tokens []TokenInfo, sel TokenSelector) (TokenInfo, error) {
	var found []TokenInfo
	for _, t := range tokens {
		if t.Initialized && sel.matches(t) {
			found = append(found, t)
		}
	}
	names := make([]string, 0, len(tokens))
	for _, t := range tokens {
		if t.Initialized {
			names = append(names, fmt.Sprintf("%q (serial %s, slot %d)", t.Label, t.Serial, t.Slot))
		}
	}
	seen := "the module sees no initialized token"
	if len(names) > 0 {
		seen = "the module sees " + strings.Join(names, ", ")
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0 && (sel.Label != "" || sel.Serial != "" || sel.HasSlot):
		return TokenInfo{}, fmt.Errorf("%w: token %s is not there; %s (`signagent token list` lists them)", tokenerr.ErrTokenNotFound, sel, seen)
	case len(found) == 0:
		return TokenInfo{}, fmt.Errorf("%w: %s", tokenerr.ErrTokenNotFound, seen)
	}
	return TokenInfo{}, ambiguous(found, sel)
}

// ambiguous says that sel matches every token of found, in which slots,
// and how to choose one. Two cards of one batch may share their label and
// even their serial (every libcacard card has the same): then only the
// slot tells them apart.
func ambiguous(found []TokenInfo, sel TokenSelector) error {
	names := make([]string, 0, len(found))
	labels, serials := map[string]bool{}, map[string]bool{}
	for _, t := range found {
		names = append(names, fmt.Sprintf("%q (serial %s) in slot %d", t.Label, t.Serial, t.Slot))
		labels[t.Label], serials[t.Serial] = true, true
	}
	var flags []string
	if len(labels) == len(found) && sel.Label == "" {
		flags = append(flags, "--token-label")
	}
	if len(serials) == len(found) && sel.Serial == "" {
		flags = append(flags, "--token-serial")
	}
	how := fmt.Sprintf("by its slot with a pkcs11: URI, e.g. --key \"pkcs11:slot-id=%d;token=%s\"", found[0].Slot, uri.Escape([]byte(found[0].Label)))
	if len(flags) > 0 {
		how = "with " + strings.Join(flags, " or ") + ", or " + how
	}
	how = "choose one " + how
	what := sel.String()
	if sel == (TokenSelector{}) {
		what = "and none was chosen"
	}
	return fmt.Errorf("%w %s: %s; %s (`signagent token list` lists them)", tokenerr.ErrTokenAmbiguous, what, strings.Join(names, ", "), how)
}
