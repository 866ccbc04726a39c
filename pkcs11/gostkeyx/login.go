package gostkeyx

import (
	"fmt"
	"slices"

	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// NotOffered is what token check says of certificate login on a
// GOST token that offers no key agreement at all.
const NotOffered = "not offered by this token (no GOST key agreement; a vendor module is needed, see docs/tokens.md)"

// ErrNoKeyAgreement: the token lists none of the mechanisms of any
// way (Ways), so a GOST certificate login cannot be opened on it
// whatever else it offers (OpenSC's GOST cards). It is a tokenerr.ErrKeyUsage.
var ErrNoKeyAgreement error = noKeyAgreement{}

type noKeyAgreement struct{}

func (noKeyAgreement) Error() string { return "certificate login is " + NotOffered }
func (noKeyAgreement) Unwrap() error { return tokenerr.ErrKeyUsage }

// LoginOffered lists the ways the token's mechanisms (code -> flags)
// and the key's attributes allow, in order of preference, or an error that
// names what is missing (Offered).
func LoginOffered(flags map[uint]uint, derive, unwrap bool, token, key string) ([]Way, error) {
	if !slices.ContainsFunc(Ways, func(w Way) bool {
		return slices.ContainsFunc(w.Needs(), func(n MechanismUse) bool { return flags[n.Code] != 0 })
	}) {
		// None of what any way needs (a card behind OpenSC: no open driver
		// does GOST key agreement).
		return nil, fmt.Errorf("token %q, key %q: %w", token, key, ErrNoKeyAgreement)
	}
	ways, why := Offered(flags, derive, unwrap, key)
	if why != "" {
		return nil, fmt.Errorf("%w: token %q cannot open a GOST certificate login's challenge with key %q: %s", tokenerr.ErrKeyUsage, token, key, why)
	}
	return ways, nil
}
