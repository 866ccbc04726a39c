package pkcs11

import (
	"context"
	"fmt"
	"strings"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/uri"
)

// TokenInfo describes a token the module sees.
type TokenInfo struct {
	Slot         uint     `json:"slot"`
	Label        string   `json:"label"`
	Serial       string   `json:"serial"`
	Manufacturer string   `json:"manufacturer"`
	Model        string   `json:"model"`
	Flags        []string `json:"flags"`
	Initialized  bool     `json:"initialized"`

	raw p11.TokenInfo // as the module gave it
}

// ListTokens returns the tokens present in the module's slots.
func ListTokens(ctx context.Context, modulePath string) ([]TokenInfo, error) {
	m, release, err := useModule(ctx, modulePath)
	if err != nil {
		return nil, err
	}
	defer release()
	return call(ctx, m, ReadTokens, nil)
}

// useModule acquires the module at path from this process's registry.
func useModule(ctx context.Context, path string) (*module, func(), error) {
	if _, err := ResolveModule(path, "flag"); err != nil {
		return nil, nil, err
	}
	m, err := defaultRegistry.acquire(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	release := func() { defaultRegistry.release(m) }
	if err := m.ensureInitialized(); err != nil {
		release()
		return nil, nil, err
	}
	return m, release, nil
}

// WithModule runs fn in the module at path as loaded for this process
// (loading it if need be), within ctx: what package inspect reads a module
// and its tokens through, over the Backend seam.
func WithModule(ctx context.Context, path string, fn func(b Backend) error) error {
	m, release, err := useModule(ctx, path)
	if err != nil {
		return err
	}
	defer release()
	_, err = call(ctx, m, func(b Backend) (struct{}, error) { return struct{}{}, fn(b) }, nil)
	return err
}

// HoldModule loads the module at path (if this process has not) and keeps
// it loaded and initialized until the returned function is called, so that
// several WithModule calls in a row use one C_Initialize.
func HoldModule(ctx context.Context, path string) (func(), error) {
	_, release, err := useModule(ctx, path)
	return release, err
}

// ProvisioningContext is for provisioning only (devtoken/softhsm, the
// test rigs): it hands out the miekg/pkcs11 context of the module as loaded
// for this process, to create and destroy objects. It bypasses the Backend
// seam: no deadline bounds its calls, no fault is injected into them, and
// no key is marked lost by them. Signing, decrypting and looking at tokens
// go through Open and the Backend. Call the returned function to release
// the module.
func ProvisioningContext(path string) (*p11.Ctx, func(), error) {
	m, release, err := useModule(context.Background(), path)
	if err != nil {
		return nil, nil, err
	}
	lib, ok := m.b.(library)
	if !ok {
		release()
		return nil, nil, fmt.Errorf("%w: %s is not loaded through miekg/pkcs11", tokenerr.ErrNotAModule, path)
	}
	return lib.Ctx, release, nil
}

// ReadTokens reads the tokens present in the module's slots, in a call
// the caller makes (WithModule).
func ReadTokens(m Backend) ([]TokenInfo, error) {
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
			raw:          ti,
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

// ULong reads a CK_ULONG attribute value.
func ULong(b []byte) uint {
	var n uint
	for i := len(b) - 1; i >= 0; i-- { // native little-endian CK_ULONG
		n = n<<8 | uint(b[i])
	}
	return n
}

// CurveNames names the curves of EC keys by their OIDs.
var CurveNames = map[string]string{
	"1.2.840.10045.3.1.7": "P-256",
	"1.3.132.0.34":        "P-384",
	"1.3.132.0.35":        "P-521",
}
