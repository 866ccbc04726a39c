package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
)

// The media types of an SBOM referrer (OCI image spec 1.1, "artifacts"):
// the SPDX JSON's own as the artifact's type and its one layer's, and the
// empty descriptor as its configuration.
const (
	spdxJSONType   = "application/spdx+json"
	emptyType      = "application/vnd.oci.empty.v1+json"
	ociManifest    = "application/vnd.oci.image.manifest.v1+json"
	ociIndex       = "application/vnd.oci.image.index.v1+json"
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

// attachSBOM pushes the SBOM in file as an OCI 1.1 referrer of image (a
// reference by digest, REGISTRY/REPOSITORY@sha256:...): the SPDX JSON as a
// blob, the empty configuration, then the artifact manifest naming the
// image as its subject, by its own digest (no tag). A registry without the
// referrers API (it answers GET /v2/NAME/referrers/DIGEST with 404, as
// distribution v3.0.0 and ghcr.io do) is given the referrers tag schema's
// index instead (distribution spec 1.1, "Unavailable Referrers API"): the
// OCI index tagged sha256-HEX, the referrer added to what it lists, with
// its artifactType. Credentials are the docker/podman configuration's (as
// cosign's); a registry on loopback is spoken to over plain HTTP. It
// returns the referrer's reference.
func attachSBOM(image, file string) (string, error) {
	ctx := context.Background()
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
	repo := ref.Context()
	auth, err := authn.DefaultKeychain.Resolve(repo)
	if err != nil {
		return "", err
	}
	opts := []remote.Option{remote.WithAuth(auth), remote.WithContext(ctx)}
	head, err := remote.Head(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("the image %s: %w", ref, err)
	}
	if head.Digest.String() != ref.DigestStr() {
		return "", fmt.Errorf("the registry answers for %s with %s", ref, head.Digest)
	}
	for _, l := range []v1.Layer{static.NewLayer(emptyJSON, emptyType), static.NewLayer(sbom, spdxJSONType)} {
		if err := remote.WriteLayer(repo, l, opts...); err != nil {
			return "", fmt.Errorf("pushing a blob to %s: %w", repo, err)
		}
	}
	m, err := sbomManifest(sbom, file, descriptor{MediaType: string(head.MediaType), Digest: head.Digest.String(), Size: head.Size})
	if err != nil {
		return "", err
	}
	// The manifest by hand (remote.Put would keep the tag schema's index
	// itself, but with the configuration's media type as the artifactType).
	rt, err := transport.NewWithContext(ctx, repo.Registry, auth, http.DefaultTransport, []string{repo.Scope(transport.PushScope)})
	if err != nil {
		return "", err
	}
	r := registryAPI{client: &http.Client{Transport: rt}, base: fmt.Sprintf("%s://%s/v2/%s", repo.Registry.Scheme(), repo.RegistryStr(), repo.RepositoryStr())}
	d := digestOf(m)
	resp, err := r.do(ctx, http.MethodPut, "/manifests/"+d, ociManifest, m, http.StatusCreated)
	if err != nil {
		return "", fmt.Errorf("pushing the SBOM's referrer of %s: %w", ref, err)
	}
	if resp.Header.Get("OCI-Subject") != ref.DigestStr() {
		// No OCI-Subject: the registry may have no referrers API.
		if err := r.addToTagSchema(ctx, ref.DigestStr(), descriptor{MediaType: ociManifest, Digest: d, Size: int64(len(m))}); err != nil {
			return "", fmt.Errorf("the referrers tag schema's index of %s: %w", ref, err)
		}
	}
	return repo.Digest(d).String(), nil
}

// registryAPI speaks the distribution API of one repository.
type registryAPI struct {
	client *http.Client
	base   string
}

// do makes one request, with body as contentType (or Accept it, for a
// GET), and wants one of the statuses.
func (r registryAPI) do(ctx context.Context, method, path, contentType string, body []byte, want ...int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if method == http.MethodGet {
		req.Header.Set("Accept", contentType)
	} else {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if slices.Contains(want, resp.StatusCode) {
		return resp, nil
	}
	return nil, fmt.Errorf("%s %s: %s: %.200s", method, path, resp.Status, bytes.TrimSpace(b))
}

// addToTagSchema adds the referrer desc (an SBOM's manifest) to the
// referrers of subject, unless the registry has the referrers API: the OCI
// index tagged sha256-HEX, made if there is none, what it lists already
// kept as it is.
func (r registryAPI) addToTagSchema(ctx context.Context, subject string, desc descriptor) error {
	resp, err := r.do(ctx, http.MethodGet, "/referrers/"+subject, ociIndex, nil, http.StatusOK, http.StatusNotFound)
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusOK {
		return nil // the registry lists referrers itself
	}
	tag := "/manifests/" + strings.Replace(subject, ":", "-", 1)
	resp, err = r.do(ctx, http.MethodGet, tag, ociIndex, nil, http.StatusOK, http.StatusNotFound)
	if err != nil {
		return err
	}
	index := map[string]any{"schemaVersion": 2, "mediaType": ociIndex, "manifests": []any{}}
	if resp.StatusCode == http.StatusOK {
		index = nil
		if err := json.NewDecoder(resp.Body).Decode(&index); err != nil || index["mediaType"] != ociIndex {
			return fmt.Errorf("the tag %s is not an OCI index", path.Base(tag))
		}
	}
	list, _ := index["manifests"].([]any)
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["digest"] == desc.Digest {
			return nil
		}
	}
	index["manifests"] = append(list, map[string]any{"mediaType": desc.MediaType, "digest": desc.Digest, "size": desc.Size, "artifactType": spdxJSONType})
	b, err := json.Marshal(index)
	if err != nil {
		return err
	}
	_, err = r.do(ctx, http.MethodPut, tag, ociIndex, b, http.StatusCreated)
	return err
}
