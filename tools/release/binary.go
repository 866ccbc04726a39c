package main

import (
	"debug/buildinfo"
	"fmt"
	"net/url"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
)

// golangPURL is a Go module's package URL (purl-spec: pkg:golang, the path
// lower-cased and escaped segment by segment).
func golangPURL(path, version string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(strings.ToLower(s))
	}
	return "pkg:golang/" + strings.Join(segs, "/") + "@" + url.PathEscape(version)
}

// module is one module of a binary's build information: the replacement's
// path and version where it was replaced (what is really linked).
func module(m *debug.Module) (path, version string) {
	if m.Replace != nil {
		m = m.Replace
	}
	return m.Path, m.Version
}

// modulePackage is the SPDX package of a Go module.
func modulePackage(path, version, sum string) pkg {
	p := pkg{
		Name:             path,
		SPDXID:           spdxID("go-module", path, version),
		VersionInfo:      version,
		DownloadLocation: "NOASSERTION",
		LicenseConcluded: "NOASSERTION",
		LicenseDeclared:  "NOASSERTION",
		Copyright:        "NOASSERTION",
		PrimaryPurpose:   "LIBRARY",
		ExternalRefs:     []externalRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: golangPURL(path, version)}},
	}
	if strings.HasPrefix(sum, "h1:") {
		p.LicenseComments = "go.sum hash " + sum
	}
	return p
}

// binaryPackages adds to doc the binary at path and every module of its
// build information (and Go's standard library at the toolchain's
// version), each a dependency of the binary; it returns the binary's
// element identifier.
func binaryPackages(doc *document, path, name, version string) (string, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: no Go build information: %v", path, err)
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return "", err
	}
	bin := pkg{
		Name:             name,
		SPDXID:           spdxID("binary", name, filepath.Base(path), sum[:12]),
		VersionInfo:      version,
		Supplier:         "Organization: signagent",
		DownloadLocation: "https://github.com/signagent/signagent",
		Checksums:        []checksum{{Algorithm: "SHA256", Value: sum}},
		LicenseConcluded: "Apache-2.0",
		LicenseDeclared:  "Apache-2.0",
		Copyright:        "NOASSERTION",
		PrimaryPurpose:   "APPLICATION",
		ExternalRefs:     []externalRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: golangPURL(info.Main.Path, version)}},
	}
	doc.Packages = append(doc.Packages, bin)
	std := modulePackage("stdlib", strings.TrimPrefix(info.GoVersion, "go"), "")
	std.ExternalRefs[0].Locator = golangPURL("stdlib", info.GoVersion)
	std.LicenseDeclared, std.LicenseConcluded = "BSD-3-Clause", "BSD-3-Clause"
	deps := []pkg{std}
	for _, m := range info.Deps {
		p, v := module(m)
		deps = append(deps, modulePackage(p, v, m.Sum))
	}
	sort.Slice(deps[1:], func(i, j int) bool { return deps[1+i].Name < deps[1+j].Name })
	for _, d := range deps {
		doc.Packages = append(doc.Packages, d)
		doc.Relationships = append(doc.Relationships, relationship{Element: bin.SPDXID, Type: "DEPENDS_ON", Related: d.SPDXID})
	}
	return bin.SPDXID, nil
}

// checkBinary compares the SBOM doc with the binary at path: every module
// of its build information at its exact version, and no Go module the
// binary does not hold.
func checkBinary(doc *document, path string) error {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: no Go build information: %v", path, err)
	}
	want := map[string]bool{golangPURL("stdlib", info.GoVersion): true}
	for _, m := range info.Deps {
		want[golangPURL(module(m))] = true
	}
	got := map[string]bool{}
	for _, p := range doc.Packages {
		if u := p.purl("golang"); u != "" && p.PrimaryPurpose != "APPLICATION" {
			got[u] = true
			if !want[u] {
				return fmt.Errorf("the SBOM names %s, which %s does not hold", u, filepath.Base(path))
			}
		}
	}
	for u := range want {
		if !got[u] {
			return fmt.Errorf("the SBOM lacks %s, which %s holds", u, filepath.Base(path))
		}
	}
	return nil
}
