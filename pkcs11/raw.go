package pkcs11

import (
	"errors"
	"fmt"

	p11 "github.com/miekg/pkcs11"
)

// rawModule is a miekg/pkcs11 context used for listing and provisioning.
type rawModule struct {
	*p11.Ctx
	finalize bool
}

// openRaw loads and initializes the module. If this process already has the
// module initialized (a crypto11 context is open), the module is shared and
// not finalized on close, so that the other user keeps working.
func openRaw(path string) (*rawModule, error) {
	if err := CheckModule(path); err != nil {
		return nil, err
	}
	ctx := p11.New(path)
	if ctx == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotAModule, path)
	}
	m := &rawModule{Ctx: ctx, finalize: true}
	if err := ctx.Initialize(); err != nil {
		if !errors.Is(err, p11.Error(p11.CKR_CRYPTOKI_ALREADY_INITIALIZED)) {
			ctx.Destroy()
			return nil, classify("initialize the PKCS#11 module "+path, err)
		}
		m.finalize = false
	}
	return m, nil
}

func (m *rawModule) close() {
	if m.finalize {
		_ = m.Finalize()
	}
	m.Destroy()
}

// OpenRaw gives provisioning code (package softhsm) the raw module with the
// same sharing rules as the listing functions. Call the returned function to
// release it.
func OpenRaw(path string) (*p11.Ctx, func(), error) {
	m, err := openRaw(path)
	if err != nil {
		return nil, nil, err
	}
	return m.Ctx, m.close, nil
}
