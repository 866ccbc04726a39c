package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The subset of SPDX 2.3's JSON form (https://spdx.github.io/spdx-spec/v2.3/)
// these SBOMs use: one document, its packages, their relationships.

type document struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      creationInfo       `json:"creationInfo"`
	DocumentDescribes []string           `json:"documentDescribes"`
	Packages          []pkg              `json:"packages"`
	Relationships     []relationship     `json:"relationships"`
	Extracted         []extractedLicence `json:"hasExtractedLicensingInfos,omitempty"`
}

type creationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type pkg struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	VersionInfo      string        `json:"versionInfo"`
	Supplier         string        `json:"supplier,omitempty"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	Checksums        []checksum    `json:"checksums,omitempty"`
	LicenseConcluded string        `json:"licenseConcluded"`
	LicenseDeclared  string        `json:"licenseDeclared"`
	Copyright        string        `json:"copyrightText"`
	LicenseComments  string        `json:"licenseComments,omitempty"`
	PrimaryPurpose   string        `json:"primaryPackagePurpose,omitempty"`
	ExternalRefs     []externalRef `json:"externalRefs,omitempty"`
}

type checksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type externalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

type extractedLicence struct {
	ID   string `json:"licenseId"`
	Text string `json:"extractedText"`
	Name string `json:"name"`
}

// purl gives a package's package URL of the given type.
func (p pkg) purl(typ string) string {
	for _, r := range p.ExternalRefs {
		if r.Type == "purl" && strings.HasPrefix(r.Locator, "pkg:"+typ+"/") {
			return r.Locator
		}
	}
	return ""
}

var idUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxID makes an SPDX element identifier from parts.
func spdxID(parts ...string) string {
	return "SPDXRef-" + strings.Trim(idUnsafe.ReplaceAllString(strings.Join(parts, "-"), "-"), "-")
}

// newDocument starts a document named name, dated by SOURCE_DATE_EPOCH
// (the commit's date: two builds of one commit write the same file), its
// namespace derived from name and what it describes.
func newDocument(name, seed string) *document {
	created := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var sec int64
		if _, err := fmt.Sscan(s, &sec); err == nil {
			created = time.Unix(sec, 0).UTC()
		}
	}
	sum := sha256.Sum256([]byte(seed))
	return &document{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              name,
		DocumentNamespace: "https://github.com/signagent/signagent/spdx/" + name + "-" + hex.EncodeToString(sum[:8]),
		CreationInfo: creationInfo{
			Created:  created.Format(time.RFC3339),
			Creators: []string{"Tool: signagent-release-sbom", "Organization: signagent"},
		},
	}
}

// fileSHA256 is the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// write writes doc as indented JSON to path, whole or not at all.
func (d *document) write(path string) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sbom-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// readDocument reads an SPDX 2.3 JSON document.
func readDocument(path string) (*document, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d document
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s is not SPDX JSON: %v", path, err)
	}
	if d.SPDXVersion != "SPDX-2.3" {
		return nil, fmt.Errorf("%s is %q, want SPDX-2.3", path, d.SPDXVersion)
	}
	return &d, nil
}
