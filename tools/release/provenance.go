package main

import (
	"encoding/json"
	"io"
	"path/filepath"
	"runtime"
)

// provenance writes a SLSA provenance v0.2 predicate (what `cosign attest
// --type slsaprovenance` wraps in an in-toto statement): the builder, the
// build command, the commit as the source material and the files given as
// further materials (each by its SHA-256: the Debian packages of the
// roots, go.sum).
func provenance(w io.Writer, repo, commit, command string, files []string) error {
	type material struct {
		URI    string            `json:"uri"`
		Digest map[string]string `json:"digest"`
	}
	mats := []material{{URI: "git+" + repo + "@" + commit, Digest: map[string]string{"sha1": commit}}}
	for _, f := range files {
		sum, err := fileSHA256(f)
		if err != nil {
			return err
		}
		mats = append(mats, material{URI: "file:" + filepath.ToSlash(f), Digest: map[string]string{"sha256": sum}})
	}
	p := map[string]any{
		"builder":   map[string]any{"id": repo + "/scripts/release.sh"},
		"buildType": "https://github.com/signagent/signagent/docs/releases.md@v1",
		"invocation": map[string]any{
			"configSource": map[string]any{"uri": "git+" + repo, "digest": map[string]string{"sha1": commit}, "entryPoint": command},
			"environment":  map[string]any{"GOOS": runtime.GOOS, "GOARCH": runtime.GOARCH},
		},
		"metadata": map[string]any{
			"buildInvocationId": commit,
			"completeness":      map[string]bool{"parameters": true, "environment": false, "materials": true},
			"reproducible":      true,
		},
		"materials": mats,
	}
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(p)
}
