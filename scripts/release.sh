#!/usr/bin/env bash
# Makes a release's files in dist/ (make release-snapshot), without the
# release key; docs/releases.md says how a user checks each. In order:
#
#   the images and their index   scripts/image.sh: dist/signagent_V_ARCH.oci.tar
#                                (amd64, arm64) and dist/signagent_V.oci.tar
#   archives                     dist/signagent_V_linux_ARCH.tar.gz: the images'
#                                binary (the same hardened build), README, LICENSE,
#                                CHANGELOG; repeatable (sorted, dated by the commit)
#   the Debian packages          scripts/package.sh: dist/signagent_DEBV_ARCH.deb (amd64, arm64;
#                                the other architecture's cross-compiled as its image's binary is)
#   SBOMs (SPDX 2.3 JSON)        dist/signagent_V_linux_ARCH.spdx.json for each binary,
#                                dist/signagent_V_ARCH.oci.spdx.json for each image
#                                (tools/release: its doc comment says what each lists)
#   the chart                    dist/signagent-CHARTVERSION.tgz (helm package, tools/helm's helm),
#                                after helm lint and helm template with each example
#                                values file (scripts/chart-check.sh)
#   checksums                    dist/checksums.txt, sha256sum's format, names relative to dist/
#   its signature                dist/checksums.txt.sig (cosign sign-blob, no transparency
#                                log) and dist/cosign.pub, the key that verifies it
#
# The signing key: COSIGN_KEY names the release key's file (its password
# in COSIGN_PASSWORD, as cosign reads it); without it a throwaway key pair
# is made in build/release-key (0700; its password there too, 0600, for
# scripts/release-publish.sh), never in dist/ and never in argv. The
# images are signed where they are pushed: scripts/release-publish.sh.
#
# V is git describe without a leading v.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
fail() { echo "release: $*" >&2; exit 1; }
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
version=${version#v}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
arches=(amd64 arm64)
mkdir -p dist build/tools
rm -f dist/signagent_*.tar.gz dist/*.spdx.json dist/checksums.txt* dist/cosign.pub

# The tools of the release, each from its own module under tools/.
(cd tools/release && $GO build -o ../../build/tools/release .) || fail "building tools/release failed"
release=build/tools/release

scripts/image.sh >/dev/null || fail "the images failed (scripts/image.sh)"
for arch in "${arches[@]}"; do
	bin=build/image/$arch/ctx/signagent
	a=build/archive/signagent_${version}_linux_$arch
	rm -rf "$a" && mkdir -p "$a"
	cp "$bin" README.md LICENSE CHANGELOG.md "$a/"
	tar -C build/archive --sort=name --numeric-owner --owner=0 --group=0 --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
		-cf - "$(basename "$a")" | gzip -9n > "dist/$(basename "$a").tar.gz"
	$release sbom-binary -out "dist/signagent_${version}_linux_$arch.spdx.json" -version "$version" "$bin" ||
		fail "the SBOM of the $arch binary failed"
	$release sbom-image -out "dist/signagent_${version}_$arch.oci.spdx.json" -version "$version" -arch "$arch" "build/image/$arch/root" ||
		fail "the SBOM of the $arch image failed"
done
# The machine's own architecture's package first: its build clears dist/'s.
host=$(dpkg --print-architecture)
for arch in "$host" $(printf '%s\n' "${arches[@]}" | grep -vx "$host"); do
	PACKAGE_ARCH=$arch scripts/package.sh >/dev/null || fail "the $arch Debian package failed (PACKAGE_ARCH=$arch scripts/package.sh)"
done
rm -f dist/signagent-*.tgz
helm=$($GO -C tools/helm tool -n helm) || fail "building helm (tools/helm) failed"
# Not packaged unless it renders with every example values file.
out=$(HELM=$helm scripts/chart-check.sh 2>&1 >/dev/null) || fail "$out"
"$helm" package deploy/helm/signagent --destination dist >/dev/null || fail "helm package deploy/helm/signagent failed"

(cd dist && sha256sum -- signagent_"$version"*.tar.gz signagent_*.deb signagent_"$version"*.oci.tar signagent_"$version"*.spdx.json \
	signagent-*.tgz > checksums.txt.new && mv checksums.txt.new checksums.txt)

# The signature of checksums.txt, and the key that verifies it.
cosign=$($GO -C tools/cosign tool -n cosign) || fail "building cosign (tools/cosign) failed"
if [ -z "${COSIGN_KEY:-}" ]; then
	k=build/release-key
	rm -rf "$k" && mkdir -p "$k" && chmod 0700 "$k"
	(umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' > "$k/password")
	COSIGN_PASSWORD=$(cat "$k/password") "$cosign" generate-key-pair --output-key-prefix "$k/cosign" >/dev/null 2>&1 ||
		fail "cosign generate-key-pair failed"
	export COSIGN_KEY=$k/cosign.key
	COSIGN_PASSWORD=$(cat "$k/password")
	export COSIGN_PASSWORD
	echo "release: no release key (COSIGN_KEY): signed with a throwaway key, dist/cosign.pub" >&2
fi
"$cosign" public-key --key "$COSIGN_KEY" > dist/cosign.pub 2>/dev/null || fail "cosign public-key of $COSIGN_KEY failed (is COSIGN_PASSWORD its password?)"
"$cosign" sign-blob --yes --tlog-upload=false --key "$COSIGN_KEY" --output-signature dist/checksums.txt.sig dist/checksums.txt >/dev/null 2>"build/sign-blob.log" ||
	fail "cosign sign-blob dist/checksums.txt failed: $(tail -n 1 build/sign-blob.log)"
chmod 0644 dist/checksums.txt.sig
echo "release: dist/ holds $(wc -l < dist/checksums.txt) files of version $version (dist/checksums.txt)"
