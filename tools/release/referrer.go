package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The media types of an SBOM referrer (OCI image spec 1.1, "artifacts"):
// the SPDX JSON's own as the artifact's type and its one layer's, and the
// empty descriptor as its configuration.
const (
	spdxJSONType   = "application/spdx+json"
	emptyType      = "application/vnd.oci.empty.v1+json"
	ociManifest    = "application/vnd.oci.image.manifest.v1+json"
	titleAnnotaton = "org.opencontainers.image.title"
)

// emptyJSON is the OCI empty descriptor's content, "{}".
var emptyJSON = []byte("{}")

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type artifactManifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	ArtifactType  string       `json:"artifactType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
	Subject       descriptor   `json:"subject"`
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// sbomManifest is the artifact manifest of an SBOM (its bytes and its
// file's name) whose subject is the image described by subject: what the
// registry lists under GET /v2/NAME/referrers/DIGEST with artifactType
// application/spdx+json. The same SBOM and subject give the same bytes.
func sbomManifest(sbom []byte, file string, subject descriptor) ([]byte, error) {
	m := artifactManifest{
		SchemaVersion: 2,
		MediaType:     ociManifest,
		ArtifactType:  spdxJSONType,
		Config:        descriptor{MediaType: emptyType, Digest: digestOf(emptyJSON), Size: int64(len(emptyJSON))},
		Layers: []descriptor{{MediaType: spdxJSONType, Digest: digestOf(sbom), Size: int64(len(sbom)),
			Annotations: map[string]string{titleAnnotaton: filepath.Base(file)}}},
		Subject: subject,
	}
	return json.Marshal(m)
}

// rawManifest is a manifest's bytes as remote.Put takes them.
type rawManifest struct {
	b  []byte
	mt types.MediaType
}

func (r rawManifest) RawManifest() ([]byte, error)        { return r.b, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return r.mt, nil }

// attachSBOM pushes the SBOM in file as an OCI 1.1 referrer of image (a
// reference by digest, REGISTRY/REPOSITORY@sha256:...): the SPDX JSON as a
// blob, the empty configuration, then the artifact manifest naming the
// image as its subject, by its own digest (no tag). Credentials are the
// docker/podman configuration's (as cosign's); a registry on loopback is
// spoken to over plain HTTP. It returns the referrer's reference.
func attachSBOM(image, file string) (string, error) {
	ref, err := name.NewDigest(image)
	if err != nil {
		return "", fmt.Errorf("the image %q is not a reference by digest: %w", image, err)
	}
	sbom, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var probe map[string]any
	if err := json.Unmarshal(sbom, &probe); err != nil || probe["spdxVersion"] == nil {
		return "", fmt.Errorf("%s is not an SPDX JSON document", file)
	}
	opts := []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	head, err := remote.Head(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("the image %s: %w", ref, err)
	}
	if head.Digest.String() != ref.DigestStr() {
		return "", fmt.Errorf("the registry answers for %s with %s", ref, head.Digest)
	}
	repo := ref.Context()
	for _, b := range [][]byte{emptyJSON, sbom} {
		mt := types.MediaType(emptyType)
		if len(b) != len(emptyJSON) || string(b) != string(emptyJSON) {
			mt = spdxJSONType
		}
		if err := remote.WriteLayer(repo, static.NewLayer(b, mt), opts...); err != nil {
			return "", fmt.Errorf("pushing %s to %s: %w", mt, repo, err)
		}
	}
	m, err := sbomManifest(sbom, file, descriptor{MediaType: string(head.MediaType), Digest: head.Digest.String(), Size: head.Size})
	if err != nil {
		return "", err
	}
	dst := repo.Digest(digestOf(m))
	if err := remote.Put(dst, rawManifest{m, ociManifest}, opts...); err != nil {
		return "", fmt.Errorf("pushing the SBOM's referrer of %s: %w", ref, err)
	}
	return dst.String(), nil
}
