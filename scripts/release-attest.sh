#!/usr/bin/env bash
# The attestations and the SBOM referrer of one pushed image, given as
# scripts/release-publish.sh gives them to make release-snapshot's images
# and .goreleaser.yaml's docker_signs to goreleaser's:
#
#   scripts/release-attest.sh REPOSITORY@DIGEST ARCH SBOM
#
# With cosign, no transparency log: an in-toto SLSA provenance statement
# (the commit, the build command BUILD_COMMAND, the materials: go.sum and
# the Debian packages of the image's root, build/image/ARCH/debs, by
# SHA-256) and the SBOM as attestations; then the SBOM as an OCI 1.1
# referrer of the image (build/tools/release attach-sbom: artifactType
# application/spdx+json). The key is COSIGN_KEY (COSIGN_PASSWORD its
# password); cosign is COSIGN, else the one on the PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "release-attest: $*" >&2; exit 1; }
[ $# = 3 ] || fail "usage: scripts/release-attest.sh REPOSITORY@DIGEST ARCH SBOM"
ref=$1 arch=$2 sbom=$3
[ -n "${COSIGN_KEY:-}" ] || fail "COSIGN_KEY names no key"
[ -s "$sbom" ] || fail "$sbom is missing"
debs=(build/image/"$arch"/debs/*.deb)
[ -s "${debs[0]}" ] || fail "no Debian packages in build/image/$arch/debs (scripts/image.sh leaves them there)"
cosign=${COSIGN:-cosign}
release=build/tools/release
commit=$(git rev-parse HEAD)
log=$(mktemp)
prov=$(mktemp)
trap 'rm -f "$log" "$prov"' EXIT
# cosign's own lines (its warnings about the transparency log skipped on
# purpose) go to a log; a failure prints its first other line.
c() { "$cosign" "$@" >"$log" 2>&1 || fail "cosign $1 failed: $(grep -v '^WARNING' "$log" | head -n 1)"; }
"$release" provenance -commit "$commit" -command "${BUILD_COMMAND:-make release-snapshot (scripts/release.sh) at $commit}" go.sum "${debs[@]}" >"$prov" ||
	fail "the provenance of the $arch image failed"
c attest --yes --tlog-upload=false --key "$COSIGN_KEY" --type slsaprovenance --predicate "$prov" "$ref"
c attest --yes --tlog-upload=false --key "$COSIGN_KEY" --type spdxjson --predicate "$sbom" "$ref"
"$release" attach-sbom "$ref" "$sbom" >"$log" 2>&1 || fail "attaching the $arch image's SBOM as a referrer failed: $(tail -n 1 "$log")"
