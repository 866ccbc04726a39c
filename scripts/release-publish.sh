#!/usr/bin/env bash
# Pushes a release made by scripts/release.sh (make release-snapshot) to an
# OCI registry and signs it there:
#
#   scripts/release-publish.sh REGISTRY/REPOSITORY     e.g. 127.0.0.1:5000/signagent/signagent
#
# The index (and both images it names) as REPOSITORY:VERSION, by digest as
# built; then with cosign (tools/cosign), no transparency log: the index
# and each image signed, each given (scripts/release-attest.sh) an in-toto SLSA provenance statement
# (the commit, the build command, the materials: go.sum and the Debian
# packages of its root, by SHA-256) and its SBOM as an attestation
# (--type spdxjson); the SBOM also as an OCI 1.1 referrer of its image
# (tools/release attach-sbom: artifactType application/spdx+json, the SPDX
# JSON itself as its layer, the registry lists it under GET
# /v2/REPOSITORY/referrers/DIGEST). The key is COSIGN_KEY (COSIGN_PASSWORD its password),
# else the throwaway key release.sh made in build/release-key. Prints the
# index's reference by digest.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
fail() { echo "release-publish: $*" >&2; exit 1; }
[ $# = 1 ] || fail "usage: scripts/release-publish.sh REGISTRY/REPOSITORY"
repo=$1
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
version=${version#v}
commit=$(git rev-parse HEAD)
if [ -z "${COSIGN_KEY:-}" ]; then
	[ -s build/release-key/cosign.key ] || fail "no COSIGN_KEY and no throwaway key: run make release-snapshot first"
	export COSIGN_KEY=build/release-key/cosign.key
	COSIGN_PASSWORD=$(cat build/release-key/password)
	export COSIGN_PASSWORD
fi
cosign=$($GO -C tools/cosign tool -n cosign) || fail "building cosign (tools/cosign) failed"
tls=()
case $repo in 127.0.0.1:* | localhost:*) tls=(--dest-tls-verify=false) ;; esac

index=dist/signagent_$version.oci.tar
[ -s "$index" ] || fail "$index is missing: run make release-snapshot first"
skopeo copy --quiet --all --preserve-digests "${tls[@]}" "oci-archive:$index" "docker://$repo:$version" ||
	fail "pushing $index to $repo failed"
digest=sha256:$(skopeo inspect --raw "oci-archive:$index" | sha256sum | cut -d' ' -f1)

# cosign's own lines (its warnings about the transparency log skipped on
# purpose) go to a log; a failure prints its last line.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
c() { "$cosign" "$@" >"$log" 2>&1 || fail "cosign $1 failed: $(grep -v '^WARNING' "$log" | head -n 1)"; }
c sign --yes --tlog-upload=false --key "$COSIGN_KEY" "$repo@$digest"
build="make release-snapshot (scripts/release.sh) at $commit"
for arch in amd64 arm64; do
	d=sha256:$(skopeo inspect --raw "oci-archive:dist/signagent_${version}_$arch.oci.tar" | sha256sum | cut -d' ' -f1)
	c sign --yes --tlog-upload=false --key "$COSIGN_KEY" "$repo@$d"
	# Its provenance and SBOM, attested, and the SBOM as a referrer: the
	# script goreleaser's docker_signs run too.
	COSIGN=$cosign BUILD_COMMAND=$build scripts/release-attest.sh "$repo@$d" "$arch" "dist/signagent_${version}_$arch.oci.spdx.json" || exit 1
done
# The chart, an OCI artifact beside the image (REGISTRY/charts/signagent),
# signed as the images are.
helm=$($GO -C tools/helm tool -n helm) || fail "building helm (tools/helm) failed"
chart=$(ls dist/signagent-*.tgz 2>/dev/null | head -n1)
[ -n "$chart" ] || fail "no chart in dist/: run make release-snapshot first"
plain=()
case $repo in 127.0.0.1:* | localhost:*) plain=(--plain-http) ;; esac
"$helm" push "${plain[@]}" "$chart" "oci://${repo%%/*}/charts" >"$log" 2>&1 || fail "helm push $chart failed: $(tail -n 1 "$log")"
cdigest=$(sed -n 's/^Digest: //p' "$log")
[ -n "$cdigest" ] || fail "helm push said no digest: $(cat "$log")"
c sign --yes --tlog-upload=false --key "$COSIGN_KEY" "${repo%%/*}/charts/signagent@$cdigest"
echo "$repo@$digest"
