package locate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/signagent/signagent/safefile"
)

// A pkcs11: URI may name its module by p11-kit's name for it
// (module-name=opensc-pkcs11): the base name of a module configuration
// file, <name>.module, whose "module:" line holds the library's path, or a
// file name looked for in p11-kit's module directory. This is how
// `p11-kit list-modules` finds them.

// DefaultModuleConfigDirs are p11-kit's module configuration directories,
// first match wins: the user's (~/.config/pkcs11/modules), the system
// administrator's (/etc/pkcs11/modules), then the packages'
// (/usr/share/p11-kit/modules).
func DefaultModuleConfigDirs() []string {
	dirs := []string{}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".config", "pkcs11", "modules"))
	}
	return append(dirs, "/etc/pkcs11/modules", "/usr/share/p11-kit/modules")
}

// moduleDirs are where p11-kit looks for a module named by a relative
// path, by platform (Debian's multiarch directories, then Fedora's).
func moduleDirs() []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "386": "i386-linux-gnu",
		"arm": "arm-linux-gnueabihf", "ppc64le": "powerpc64le-linux-gnu", "s390x": "s390x-linux-gnu", "riscv64": "riscv64-linux-gnu"}[runtime.GOARCH]
	dirs := []string{}
	if triplet != "" {
		dirs = append(dirs, "/usr/lib/"+triplet+"/pkcs11")
	}
	return append(dirs, "/usr/lib64/pkcs11", "/usr/lib/pkcs11")
}

// ModuleByName returns the library of the module p11-kit knows as name,
// from the first of dirs (nil: DefaultModuleConfigDirs) holding
// name.module. The error lists the names that are registered.
func ModuleByName(name string, dirs []string) (string, error) {
	if dirs == nil {
		dirs = DefaultModuleConfigDirs()
	}
	for _, d := range dirs {
		b, err := safefile.Read(filepath.Join(d, name+".module"), 64<<10)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("%w: module-name=%s: %w", ErrModuleNotFound, name, err)
		}
		lib := moduleLine(b)
		if lib == "" {
			return "", fmt.Errorf("%w: module-name=%s: %s has no \"module:\" line", ErrModuleNotFound, name, filepath.Join(d, name+".module"))
		}
		if filepath.IsAbs(lib) {
			return lib, nil
		}
		for _, md := range moduleDirs() {
			if p := filepath.Join(md, lib); fileExists(p) {
				return p, nil
			}
		}
		return "", fmt.Errorf("%w: module-name=%s names %s, which is in none of %s", ErrModuleNotFound, name, lib, strings.Join(moduleDirs(), ", "))
	}
	known := registeredModules(dirs)
	list := "none is registered"
	if len(known) > 0 {
		list = "registered: " + strings.Join(known, ", ")
	}
	return "", fmt.Errorf("%w: module-name=%s: p11-kit has no module of that name (%s; looked in %s)", ErrModuleNotFound, name, list, strings.Join(dirs, ", "))
}

// moduleLine is the value of the "module:" key of a p11-kit module
// configuration file.
func moduleLine(b []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "module" && !strings.HasPrefix(line, "#") {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// registeredModules lists the names of the module files in dirs.
func registeredModules(dirs []string) []string {
	seen := map[string]bool{}
	var names []string
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if n, ok := strings.CutSuffix(e.Name(), ".module"); ok && !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	return names
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
