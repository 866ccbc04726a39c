package pkcs11

import (
	"context"
	"fmt"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// ListTokens returns the tokens present in the module's slots.
func ListTokens(ctx context.Context, modulePath string) ([]tokeninfo.TokenInfo, error) {
	m, release, err := useModule(ctx, modulePath)
	if err != nil {
		return nil, err
	}
	defer release()
	return call(ctx, m, func(b Backend) ([]tokeninfo.TokenInfo, error) { return tokeninfo.ReadTokens(b) }, nil)
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

// ProvisioningContext is for provisioning only (pkcs11/softhsm, the
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
