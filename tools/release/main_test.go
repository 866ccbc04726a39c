package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The test binary has Go build information of its own (this module's
// dependencies): its SBOM is checked against it, and one naming a module
// it does not hold, or lacking one it does, is refused in one line.
func TestBinarySBOM(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sbom := filepath.Join(dir, "bin.spdx.json")
	if err := run([]string{"sbom-binary", "-out", sbom, "-version", "1.2.3", self}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"check-binary", sbom, self}); err != nil {
		t.Fatalf("the SBOM of the binary itself refused: %v", err)
	}
	doc, err := readDocument(sbom)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Packages[0].purl("golang") == "" || !strings.Contains(strings.Join(purls(doc), " "), "pkg:golang/github.com/github/go-spdx/v2@v2.8.0") {
		t.Fatalf("the SBOM lacks the module go-spdx at v2.8.0: %v", purls(doc))
	}

	for name, edit := range map[string]func(d *document){
		"a module the binary does not hold": func(d *document) {
			d.Packages = append(d.Packages, modulePackage("example.com/not/linked", "v1.0.0", ""))
		},
		"another version": func(d *document) {
			for i := range d.Packages {
				if d.Packages[i].Name == "github.com/github/go-spdx/v2" {
					d.Packages[i].ExternalRefs[0].Locator = golangPURL(d.Packages[i].Name, "v2.7.0")
				}
			}
		},
		"a module left out": func(d *document) { d.Packages = d.Packages[:len(d.Packages)-1] },
	} {
		t.Run(name, func(t *testing.T) {
			d, _ := readDocument(sbom)
			edit(d)
			bad := filepath.Join(dir, "bad.spdx.json")
			if err := d.write(bad); err != nil {
				t.Fatal(err)
			}
			err := run([]string{"check-binary", bad, self})
			if err == nil {
				t.Fatal("refused nothing")
			}
			if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "pkg:golang/") {
				t.Fatalf("not one line naming the module: %v", err)
			}
		})
	}
}

func TestDebLicences(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ text, want string }{
		{"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\nFiles: *\nLicense: GPL-2+\n\nFiles: x\nLicense: MPL-1.1 or LGPL-2.1+\n License text\nLicense: ISC+IBM\n", "(MPL-1.1 OR LGPL-2.1-or-later),GPL-2.0-or-later,LicenseRef-ISC-IBM"},
		{"This is the Debian prepackaged version of the GNU C Library.\n... GNU Lesser General Public License ...\n", "LGPL-2.1-or-later"},
		{"no licence named here\n", "NOASSERTION"},
	} {
		f := filepath.Join(dir, "copyright")
		os.WriteFile(f, []byte(c.text), 0o644)
		got, err := debLicences(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("%q: %v, want %s", c.text[:20], got, c.want)
		}
	}
}

func purls(d *document) []string {
	var out []string
	for _, p := range d.Packages {
		out = append(out, p.purl("golang"))
	}
	return out
}
