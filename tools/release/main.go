// Command release makes and checks the release's SBOMs (SPDX 2.3 JSON) and
// its provenance statement, for scripts/release.sh and
// scripts/release-test.sh (docs/releases.md):
//
//	release sbom-binary -out FILE -name NAME -version V BINARY
//	release sbom-image  -out FILE -name NAME -version V -arch ARCH -binary PATH [-binary-file FILE] ROOT
//	release check-binary SBOM BINARY
//	release check-image  SBOM ROOT [PATH]
//	release provenance  -commit C -command CMD -repo URL FILE...
//	release attach-sbom IMAGE@DIGEST SBOM
//
// A binary's SBOM lists every module of its Go build information
// (debug/buildinfo, what `go version -m` prints) at its exact version with
// its pkg:golang purl; an image's lists every Debian package of its root
// (var/lib/dpkg/status.d) at its version, with the licences of its
// copyright file, and the binary with its modules. The checks refuse, in
// one line, an SBOM that names what the binary or root does not hold or
// lacks what it does. attach-sbom pushes an SBOM to a registry as an OCI
// 1.1 referrer of its image (referrer.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("a command: sbom-binary, sbom-image, check-binary, check-image, provenance or attach-sbom")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	out := fs.String("out", "", "the file to write")
	name := fs.String("name", "signagent", "the name of what is described")
	version := fs.String("version", "", "its version")
	arch := fs.String("arch", "", "the image's architecture")
	binary := fs.String("binary", "usr/bin/signagent", "the binary's path in the root")
	binaryFile := fs.String("binary-file", "", "sbom-image: the image's binary as a file, when ROOT does not hold it (goreleaser's image copies its own binary onto the base root)")
	commit := fs.String("commit", "", "the commit built")
	command := fs.String("command", "", "the build command")
	repo := fs.String("repo", "https://github.com/signagent/signagent", "the source repository")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	rest := fs.Args()
	switch args[0] {
	case "sbom-binary":
		if len(rest) != 1 || *out == "" || *version == "" {
			return fmt.Errorf("sbom-binary -out FILE -version V BINARY")
		}
		doc := newDocument(*name+"_"+*version+"_"+filepath.Base(filepath.Dir(rest[0]))+"-binary", rest[0]+*version)
		id, err := binaryPackages(doc, rest[0], *name, *version)
		if err != nil {
			return err
		}
		doc.DocumentDescribes = []string{id}
		doc.Relationships = append([]relationship{{Element: doc.SPDXID, Type: "DESCRIBES", Related: id}}, doc.Relationships...)
		return doc.write(*out)
	case "sbom-image":
		if len(rest) != 1 || *out == "" || *version == "" || *arch == "" {
			return fmt.Errorf("sbom-image -out FILE -version V -arch ARCH ROOT")
		}
		doc := newDocument(*name+"_"+*version+"_"+*arch+"-image", *arch+*version)
		id, err := imagePackages(doc, rest[0], *name, *version, *arch)
		if err != nil {
			return err
		}
		binPath := filepath.Join(rest[0], *binary)
		if *binaryFile != "" {
			binPath = *binaryFile
		}
		bin, err := binaryPackages(doc, binPath, *name, *version)
		if err != nil {
			return err
		}
		doc.DocumentDescribes = []string{id}
		doc.Relationships = append([]relationship{{Element: doc.SPDXID, Type: "DESCRIBES", Related: id}, {Element: id, Type: "CONTAINS", Related: bin}}, doc.Relationships...)
		return doc.write(*out)
	case "check-binary":
		if len(rest) != 2 {
			return fmt.Errorf("check-binary SBOM BINARY")
		}
		doc, err := readDocument(rest[0])
		if err != nil {
			return err
		}
		if err := checkBinary(doc, rest[1]); err != nil {
			return fmt.Errorf("%s: %w", rest[0], err)
		}
		return nil
	case "check-image":
		if len(rest) < 2 || len(rest) > 3 {
			return fmt.Errorf("check-image SBOM ROOT [PATH]")
		}
		if len(rest) == 3 {
			*binary = rest[2]
		}
		doc, err := readDocument(rest[0])
		if err != nil {
			return err
		}
		if err := checkImage(doc, rest[1], *binary); err != nil {
			return fmt.Errorf("%s: %w", rest[0], err)
		}
		return nil
	case "provenance":
		if *commit == "" || *command == "" || len(rest) == 0 {
			return fmt.Errorf("provenance -commit C -command CMD FILE...")
		}
		return provenance(os.Stdout, *repo, *commit, *command, rest)
	case "attach-sbom":
		if len(rest) != 2 {
			return fmt.Errorf("attach-sbom IMAGE@DIGEST SBOM")
		}
		ref, err := attachSBOM(rest[0], rest[1])
		if err != nil {
			return err
		}
		fmt.Println(ref)
		return nil
	}
	return fmt.Errorf("no command %q: sbom-binary, sbom-image, check-binary, check-image, provenance or attach-sbom", args[0])
}
