package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The SBOM's referrer is an OCI 1.1 artifact manifest: artifactType
// application/spdx+json, the empty configuration, the SBOM as its one layer
// (by its SHA-256 and size, named by its file) and the image as its
// subject; the same inputs give the same bytes (the same digest on every
// push).
func TestSBOMManifest(t *testing.T) {
	sbom := []byte(`{"spdxVersion": "SPDX-2.3"}`)
	subject := descriptor{MediaType: ociManifest, Digest: "sha256:" + strings.Repeat("ab", 32), Size: 1234}
	b, err := sbomManifest(sbom, "dist/x_amd64.oci.spdx.json", subject)
	if err != nil {
		t.Fatal(err)
	}
	var m artifactManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.SchemaVersion != 2 || m.MediaType != ociManifest || m.ArtifactType != spdxJSONType {
		t.Errorf("schemaVersion %d, mediaType %s, artifactType %s", m.SchemaVersion, m.MediaType, m.ArtifactType)
	}
	if m.Config.MediaType != emptyType || m.Config.Digest != "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" || m.Config.Size != 2 {
		t.Errorf("config %+v, want the OCI empty descriptor", m.Config)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != spdxJSONType || m.Layers[0].Digest != digestOf(sbom) ||
		m.Layers[0].Size != int64(len(sbom)) || m.Layers[0].Annotations[titleAnnotaton] != "x_amd64.oci.spdx.json" {
		t.Errorf("layers %+v, want the SBOM's", m.Layers)
	}
	if m.Subject.MediaType != subject.MediaType || m.Subject.Digest != subject.Digest || m.Subject.Size != subject.Size {
		t.Errorf("subject %+v, want %+v", m.Subject, subject)
	}
	again, _ := sbomManifest(sbom, "dist/x_amd64.oci.spdx.json", subject)
	if string(again) != string(b) {
		t.Errorf("two manifests of one SBOM differ:\n%s\n%s", b, again)
	}
}

// attach-sbom refuses, in one line and before reaching any registry, an
// image not named by digest and a file that is not an SPDX JSON document.
func TestAttachSBOMRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "x.json")
	os.WriteFile(bad, []byte(`{"bomFormat": "CycloneDX"}`), 0o644)
	for _, c := range []struct{ image, file, want string }{
		{"127.0.0.1:1/a/b:1.0", bad, "is not a reference by digest"},
		{"127.0.0.1:1/a/b@sha256:" + strings.Repeat("0", 64), bad, "is not an SPDX JSON document"},
	} {
		err := run([]string{"attach-sbom", c.image, c.file})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("attach-sbom %s %s: %v, want one line saying %q", c.image, c.file, err, c.want)
		}
	}
}
