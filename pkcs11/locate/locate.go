// Package locate finds a PKCS#11 module's library: the path given (a flag,
// a pkcs11: URI's module-path), $SIGNAGENT_PKCS11_MODULE, or the first of
// the usual places that exists (p11-kit's proxy, then SoftHSM); and the
// library of a module p11-kit knows by name (a URI's module-name). It
// loads nothing: package pkcs11 does, once per process.
package locate

import (
	"errors"
	"fmt"
	"os"

	"github.com/signagent/signagent/errdefs"
)

// ErrModuleNotFound: no module at the path given, none in the usual
// places, or no module registered by the name given.
var ErrModuleNotFound = errdefs.New(errdefs.ErrInvalidInput, "PKCS#11 module not found")

// ErrNotAModule: the path is not a PKCS#11 module's library.
var ErrNotAModule = errors.New("not a PKCS#11 module")

// Env is the environment variable that names the PKCS#11 module.
const Env = "SIGNAGENT_PKCS11_MODULE"

// ProxyModules are where p11-kit's proxy module is installed: loading it
// reaches every module registered with p11-kit (a Rutoken's or JaCarta's,
// OpenSC, SoftHSM: Debian's packages register theirs).
var ProxyModules = []string{
	"/usr/lib/x86_64-linux-gnu/p11-kit-proxy.so",
	"/usr/lib/aarch64-linux-gnu/p11-kit-proxy.so",
	"/usr/lib64/p11-kit-proxy.so",
}

// SoftHSMModules are where Debian, Fedora and a source build put SoftHSM,
// the development module.
var SoftHSMModules = []string{
	"/usr/lib/softhsm/libsofthsm2.so",
	"/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib64/pkcs11/libsofthsm2.so",
	"/usr/local/lib/softhsm/libsofthsm2.so",
}

// DefaultModules are the places looked in, in order, when no module is
// named: p11-kit's proxy first (the cards a machine has), then SoftHSM.
var DefaultModules = append(append([]string{}, ProxyModules...), SoftHSMModules...)

// Module is a chosen module path and how it was chosen.
type Module struct {
	Path   string
	Source string // "flag", "environment", "pkcs11 URI" or "default location"
}

// Resolve returns the module to use: explicit (from a flag or URI) if
// given, else $SIGNAGENT_PKCS11_MODULE, else the first of DefaultModules that
// exists. It checks that the path is a file; loading it is left to the
// first use, so that the module is loaded once.
func Resolve(explicit, source string) (Module, error) {
	return ResolveFrom(explicit, source, DefaultModules)
}

// ResolveFrom is Resolve with candidates in place of
// DefaultModules (dev-token wants SoftHSM, not whatever the proxy finds).
func ResolveFrom(explicit, source string, candidates []string) (Module, error) {
	m := Module{Path: explicit, Source: source}
	if m.Path == "" {
		if env := os.Getenv(Env); env != "" {
			m = Module{Path: env, Source: "environment"}
		}
	}
	if m.Path == "" {
		for _, p := range candidates {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				m = Module{Path: p, Source: "default location"}
				break
			}
		}
		if m.Path == "" {
			return m, fmt.Errorf("%w: none given and none in the usual places; install softhsm2 or name one with --module or %s", ErrModuleNotFound, Env)
		}
	}
	st, err := os.Stat(m.Path)
	if err != nil {
		return m, fmt.Errorf("%w: %s does not exist; name the module with --module or %s", ErrModuleNotFound, m.Path, Env)
	}
	if !st.Mode().IsRegular() {
		return m, fmt.Errorf("%w: %s is not a file", ErrNotAModule, m.Path)
	}
	return m, nil
}
