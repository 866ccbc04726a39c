package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/github/go-spdx/v2/spdxexp"
)

// debPackage is what a distroless root says of one Debian package: its
// control fields in var/lib/dpkg/status.d/NAME and its copyright file.
type debPackage struct {
	Name, Version, Arch, Source string
	Licences                    []string
}

// readControl reads the fields of a Debian control file (a stanza).
func readControl(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fields := map[string]string{}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields, s.Err()
}

// rootPackages lists the Debian packages of the root (status.d), sorted.
func rootPackages(root string) ([]debPackage, error) {
	dir := filepath.Join(root, "var/lib/dpkg/status.d")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("the root names no Debian packages: %v", err)
	}
	var out []debPackage
	for _, e := range ents {
		c, err := readControl(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if c["Package"] == "" || c["Version"] == "" {
			return nil, fmt.Errorf("%s names no package and version", filepath.Join(dir, e.Name()))
		}
		lic, err := debLicences(filepath.Join(root, "usr/share/doc", c["Package"], "copyright"))
		if err != nil {
			return nil, err
		}
		src, _, _ := strings.Cut(c["Source"], " ")
		out = append(out, debPackage{Name: c["Package"], Version: c["Version"], Arch: c["Architecture"], Source: src, Licences: lic})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Debian's short licence names (the copyright format's) that are not SPDX
// identifiers as written.
var debianLicence = map[string]string{
	"GPL": "GPL-1.0-or-later", "GPL-1+": "GPL-1.0-or-later", "GPL-2": "GPL-2.0-only", "GPL-2+": "GPL-2.0-or-later",
	"GPL-3": "GPL-3.0-only", "GPL-3+": "GPL-3.0-or-later", "LGPL-2": "LGPL-2.0-only", "LGPL-2+": "LGPL-2.0-or-later",
	"LGPL-2.1": "LGPL-2.1-only", "LGPL-2.1+": "LGPL-2.1-or-later", "LGPL-3": "LGPL-3.0-only", "LGPL-3+": "LGPL-3.0-or-later",
	"Expat": "MIT", "BSD-3-clause": "BSD-3-Clause", "BSD-2-clause": "BSD-2-Clause", "public-domain": "LicenseRef-public-domain",
}

var refUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxLicence turns one Debian short name into an SPDX identifier, or a
// LicenseRef- of the same name where SPDX has none.
func spdxLicence(name string) string {
	if id, ok := debianLicence[name]; ok {
		return id
	}
	if ok, _ := spdxexp.ValidateLicenses([]string{name}); ok {
		return name
	}
	return "LicenseRef-" + strings.Trim(refUnsafe.ReplaceAllString(name, "-"), "-")
}

// debLicences reads the licences a package's copyright file declares:
// every License: field of a machine-readable (DEP-5) file, as SPDX
// expressions; a free-form file (libc6's) by the GNU licences it names.
func debLicences(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("no copyright file: %v", err)
	}
	text := string(b)
	seen := map[string]bool{}
	var out []string
	add := func(l string) {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	if strings.HasPrefix(text, "Format:") {
		for _, line := range strings.Split(text, "\n") {
			v, ok := strings.CutPrefix(line, "License:")
			if !ok || strings.TrimSpace(v) == "" {
				continue
			}
			var terms []string
			for _, t := range strings.Fields(strings.ReplaceAll(strings.ReplaceAll(v, ",", " "), "|", " ")) {
				switch strings.ToLower(t) {
				case "or":
					terms = append(terms, "OR")
				case "and":
					terms = append(terms, "AND")
				default:
					terms = append(terms, spdxLicence(t))
				}
			}
			e := strings.Join(terms, " ")
			if len(terms) > 1 {
				e = "(" + e + ")"
			}
			add(e)
		}
	} else {
		if strings.Contains(text, "GNU Lesser General Public") {
			add("LGPL-2.1-or-later")
		}
		if strings.Contains(text, "GNU General Public License") {
			add("GPL-2.0-or-later")
		}
	}
	if len(out) == 0 {
		return []string{"NOASSERTION"}, nil
	}
	sort.Strings(out)
	return out, nil
}

func debPURL(p debPackage) string {
	return fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s&distro=debian-12", p.Name, strings.ReplaceAll(p.Version, ":", "%3A"), p.Arch)
}

// imagePackages adds to doc the image's Debian packages (each contained
// in the image), and returns the image's element identifier.
func imagePackages(doc *document, root, name, version, arch string) (string, error) {
	debs, err := rootPackages(root)
	if err != nil {
		return "", err
	}
	img := pkg{
		Name:             name,
		SPDXID:           spdxID("image", name, arch),
		VersionInfo:      version,
		Supplier:         "Organization: signagent",
		DownloadLocation: "NOASSERTION",
		LicenseConcluded: "NOASSERTION",
		LicenseDeclared:  "NOASSERTION",
		Copyright:        "NOASSERTION",
		PrimaryPurpose:   "CONTAINER",
		ExternalRefs: []externalRef{{Category: "PACKAGE-MANAGER", Type: "purl",
			Locator: fmt.Sprintf("pkg:oci/signagent@%s?arch=%s&repository_url=ghcr.io/signagent/signagent", version, arch)}},
	}
	doc.Packages = append(doc.Packages, img)
	refs := map[string]bool{}
	for _, d := range debs {
		terms := make([]string, len(d.Licences))
		for i, l := range d.Licences {
			terms[i] = l
			if len(d.Licences) > 1 && strings.Contains(l, " ") && !strings.HasPrefix(l, "(") {
				terms[i] = "(" + l + ")"
			}
		}
		lic := strings.Join(terms, " AND ")
		for _, id := range regexp.MustCompile(`LicenseRef-[A-Za-z0-9.-]+`).FindAllString(lic, -1) {
			refs[id] = true
		}
		p := pkg{
			Name:             d.Name,
			SPDXID:           spdxID("deb", d.Name, d.Version, d.Arch),
			VersionInfo:      d.Version,
			Supplier:         "Organization: Debian",
			DownloadLocation: "NOASSERTION",
			LicenseConcluded: "NOASSERTION",
			LicenseDeclared:  lic,
			Copyright:        "NOASSERTION",
			LicenseComments:  "from /usr/share/doc/" + d.Name + "/copyright",
			PrimaryPurpose:   "LIBRARY",
			ExternalRefs:     []externalRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: debPURL(d)}},
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, relationship{Element: img.SPDXID, Type: "CONTAINS", Related: p.SPDXID})
	}
	ids := make([]string, 0, len(refs))
	for id := range refs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		doc.Extracted = append(doc.Extracted, extractedLicence{ID: id, Name: strings.TrimPrefix(id, "LicenseRef-"),
			Text: "A licence named " + strings.TrimPrefix(id, "LicenseRef-") + " in a Debian package's copyright file; its text is in the image at /usr/share/doc/PACKAGE/copyright."})
	}
	return img.SPDXID, nil
}

// checkImage compares the SBOM doc with the root: every Debian package of
// the root at its version and no other, and the binary by its SHA-256.
func checkImage(doc *document, root, binary string) error {
	debs, err := rootPackages(root)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, d := range debs {
		want[debPURL(d)] = true
	}
	got := map[string]bool{}
	for _, p := range doc.Packages {
		if u := p.purl("deb"); u != "" {
			got[u] = true
			if !want[u] {
				return fmt.Errorf("the SBOM names %s, which the image does not hold", u)
			}
			if p.LicenseDeclared == "" || p.LicenseDeclared == "NOASSERTION" {
				return fmt.Errorf("the SBOM gives %s no licence", u)
			}
		}
	}
	for _, d := range debs {
		if !got[debPURL(d)] {
			return fmt.Errorf("the SBOM lacks %s, which the image holds", debPURL(d))
		}
	}
	sum, err := fileSHA256(filepath.Join(root, binary))
	if err != nil {
		return fmt.Errorf("the image holds no %s: %v", binary, err)
	}
	for _, p := range doc.Packages {
		for _, c := range p.Checksums {
			if p.PrimaryPurpose == "APPLICATION" && c.Algorithm == "SHA256" && c.Value == sum {
				return checkBinary(doc, filepath.Join(root, binary))
			}
		}
	}
	return fmt.Errorf("the SBOM names no binary of SHA-256 %s (the image's %s)", sum, binary)
}
