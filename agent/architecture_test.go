package agent

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/signagent/signagent/schemes"
)

// TestArchitecturePage keeps docs/architecture.md true where a test can:
// every route of the route table is listed with its rule, every package of
// the module is in the layout, and every file or folder it names in
// backquotes exists.
func TestArchitecturePage(t *testing.T) {
	root := ".."
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, r := range routeTable {
		rule := r.rule
		if rule == "" {
			rule = "open"
		}
		if row := "| `" + r.name() + "` | " + rule + " |"; !strings.Contains(page, row) {
			t.Errorf("the page does not list the route %q with its rule %q (want the row %s)", r.name(), rule, row)
		}
	}
	// The scheme list the page names is the code's.
	var names []string
	for _, e := range schemes.List() {
		names = append(names, "`"+e.Name+"`")
	}
	if line := "The schemes (`schemes.List`, `schemes/schemes.go`): " + strings.Join(names, ", ") + "."; !strings.Contains(page, line) {
		t.Errorf("the page does not list the schemes as the code does (want %q)", line)
	}
	// The emulator shares no parser with the clients it tests, and each
	// of its sides stands on the directory and the kit alone.
	emuDirs, _ := filepath.Glob(filepath.Join(root, "emulator", "*", "*.go"))
	dirs := map[string]bool{filepath.Join(root, "emulator"): true}
	for _, f := range emuDirs {
		dirs[filepath.Dir(f)] = true
	}
	for dir := range dirs {
		side := filepath.Base(dir)
		for _, imp := range goImports(t, dir) {
			for _, client := range []string{"/legacy", "/trusted", "/oidc", "/devtoken", "/pkcs11/softhsm", "/pkcs11/gosttoken", "/agent"} {
				if strings.HasSuffix(imp, "/signagent"+client) {
					t.Errorf("emulator/%s imports %s: it must spell the wire itself", side, imp)
				}
			}
			if other, ok := strings.CutPrefix(imp, "github.com/signagent/signagent/emulator/"); ok && side != "emulator" && other != "kit" && other != "directory" {
				t.Errorf("the emulator's side %s imports the side %s: sides meet in emulator/server.go only", side, other)
			}
		}
	}
	// Every package with Go code (not testdata) is named in the layout.
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, root+string(filepath.Separator))))
		if !strings.Contains(page, "`"+pkg+"`") {
			t.Errorf("package %s is not in docs/architecture.md", pkg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every path the page names exists.
	for _, m := range regexp.MustCompile("`([a-z0-9_]+(?:/[a-zA-Z0-9_.]+)*(?:\\.go|\\.md|\\.yaml|/))`").FindAllStringSubmatch(page, -1) {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("docs/architecture.md names %s, which does not exist", m[1])
		}
	}
}

// goImports lists the imports of a package's non-test files.
func goImports(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			out = append(out, strings.Trim(imp.Path.Value, `"`))
		}
	}
	return out
}
