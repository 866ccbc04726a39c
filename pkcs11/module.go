package pkcs11

import (
	"fmt"
	"os"

	p11 "github.com/miekg/pkcs11"
)

// ModuleEnv is the environment variable that names the PKCS#11 module.
const ModuleEnv = "SIGNAGENT_PKCS11_MODULE"

// DefaultModules are the places looked in, in order, when no module is named:
// SoftHSM where Debian, Fedora and a source build put it, then p11-kit's proxy,
// which reaches every module registered with p11-kit.
var DefaultModules = []string{
	"/usr/lib/softhsm/libsofthsm2.so",
	"/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib64/pkcs11/libsofthsm2.so",
	"/usr/local/lib/softhsm/libsofthsm2.so",
	"/usr/lib/x86_64-linux-gnu/p11-kit-proxy.so",
	"/usr/lib/aarch64-linux-gnu/p11-kit-proxy.so",
	"/usr/lib64/p11-kit-proxy.so",
}

// Module is a chosen module path and how it was chosen.
type Module struct {
	Path   string
	Source string // "flag", "environment", "pkcs11 URI" or "default location"
}

// ResolveModule returns the module to use: explicit (from a flag or URI) if
// given, else $SIGNAGENT_PKCS11_MODULE, else the first of DefaultModules that
// exists. It checks that the file exists and is a PKCS#11 module.
func ResolveModule(explicit, source string) (Module, error) {
	m := Module{Path: explicit, Source: source}
	if m.Path == "" {
		if env := os.Getenv(ModuleEnv); env != "" {
			m = Module{Path: env, Source: "environment"}
		}
	}
	if m.Path == "" {
		for _, p := range DefaultModules {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				m = Module{Path: p, Source: "default location"}
				break
			}
		}
		if m.Path == "" {
			return m, fmt.Errorf("%w: none given and none in the usual places; install softhsm2 or name one with --module or %s", ErrModuleNotFound, ModuleEnv)
		}
	}
	if err := CheckModule(m.Path); err != nil {
		return m, err
	}
	return m, nil
}

// CheckModule reports whether path exists and loads as a PKCS#11 module (a
// shared library exporting C_GetFunctionList). It does not initialize it.
func CheckModule(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %s does not exist; name the module with --module or %s", ErrModuleNotFound, path, ModuleEnv)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a file", ErrNotAModule, path)
	}
	ctx := p11.New(path)
	if ctx == nil {
		return fmt.Errorf("%w: %s could not be loaded as a shared library with C_GetFunctionList", ErrNotAModule, path)
	}
	ctx.Destroy()
	return nil
}
