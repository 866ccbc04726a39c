#!/usr/bin/env bash
# Tests the release (make test runs it, after the image's test): what make
# release-snapshot leaves in dist/, checked piece by piece as a partner's
# operator would check it, without this repository's help where a user has
# none (docs/releases.md: its commands are run here as written).
#
#   1. the images: an OCI archive per architecture and the index over both;
#      built a second time, the same digests; the arm64 root holds only
#      aarch64 files, and its binary, run by qemu-aarch64 on the image's
#      own root (-L), says the archive's version and linux/arm64.
#
# Each failure says what is wrong and exits 1.
. "$(dirname "$0")/lib.sh"
need skopeo qemu-aarch64 readelf jq
start=$(date +%s)
tmp=$(mktemp -d /tmp/signagent-release-test.XXXXXX)
cleanup() {
	set +e
	rm -rf "$tmp"
}
trap cleanup EXIT
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
version=${version#v}
host=$(dpkg --print-architecture)

# digests ARCHIVE...: each OCI archive's manifest (or index) digest.
digests() {
	local a
	for a in "$@"; do
		echo "$a sha256:$(skopeo inspect --raw "oci-archive:$a" | sha256sum | cut -d' ' -f1)"
	done
}
# unpack ARCHIVE DIR: the image's layers, in order, into DIR.
unpack() {
	local l
	skopeo copy --quiet "oci-archive:$1" "oci:$tmp/layout:x" >/dev/null
	mkdir -p "$2"
	for l in $(jq -r '.layers[].digest' "$tmp/layout/blobs/sha256/$(jq -r '.manifests[0].digest' "$tmp/layout/index.json" | cut -d: -f2)"); do
		tar -C "$2" -xf "$tmp/layout/blobs/sha256/${l#sha256:}"
	done
	rm -rf "$tmp/layout"
}

# 1. The images.
[ -n "${RELEASE_TEST_SKIP_SNAPSHOT:-}" ] || ${MAKE:-make} --no-print-directory release-snapshot >"$tmp/snapshot.log" 2>&1 ||
	fail "make release-snapshot failed: $(tail -n 20 "$tmp/snapshot.log")"
snap=$(date +%s)
index=dist/signagent_$version.oci.tar
images=(dist/signagent_${version}_amd64.oci.tar dist/signagent_${version}_arm64.oci.tar)
for f in "$index" "${images[@]}"; do [ -s "$f" ] || fail "$f is missing after make release-snapshot"; done
idx=$(skopeo inspect --raw "oci-archive:$index")
[ "$(jq -r .mediaType <<<"$idx")" = application/vnd.oci.image.index.v1+json ] || fail "$index holds no OCI index: $idx"
first=$(digests "${images[@]}")
for a in amd64 arm64; do
	d=$(grep "_$a.oci.tar " <<<"$first" | cut -d' ' -f2)
	[ "$(jq -r --arg a $a '.manifests[] | select(.platform.architecture == $a and .platform.os == "linux") | .digest' <<<"$idx")" = "$d" ] ||
		fail "$index does not name the $a image $d: $idx"
	cfg=$(skopeo inspect --config "oci-archive:dist/signagent_${version}_$a.oci.tar")
	[ "$(jq -r .architecture <<<"$cfg")" = "$a" ] || fail "the $a image's configuration says architecture $(jq -r .architecture <<<"$cfg")"
done
first=$(printf '%s\n%s\n' "$first" "$(digests "$index")")
# A second build of the same commit: the same digests.
scripts/image.sh >"$tmp/image2.log" 2>&1 || fail "the second image build failed: $(tail -n 5 "$tmp/image2.log")"
second=$(digests "${images[@]}" "$index")
[ "$first" = "$second" ] || fail "two builds of one commit gave different digests: $(diff <(echo "$first") <(echo "$second") | tr '\n' ' ')"
rebuilt=$(date +%s)
# The arm64 root, read back from its image: aarch64 files alone, and its
# binary runs on it under qemu.
unpack "dist/signagent_${version}_arm64.oci.tar" "$tmp/arm64"
n=0
while IFS= read -r -d '' f; do
	m=$(readelf -h "$f" 2>/dev/null | sed -n "s/^ *Machine: *//p" || true)
	[ -z "$m" ] && continue
	n=$((n + 1))
	[ "$m" = AArch64 ] || fail "the arm64 image holds ${f#"$tmp/arm64"}, built for $m"
done < <(find "$tmp/arm64" -type f -print0)
[ "$n" -ge 5 ] || fail "the arm64 image holds $n ELF files, want the binary, the loader and the libraries"
out=$(qemu-aarch64 -L "$tmp/arm64" "$tmp/arm64/usr/bin/signagent" version --json) || fail "the arm64 binary under qemu-aarch64 failed: $out"
[ "$(jq -r .version <<<"$out")" = "$version" ] || fail "the arm64 binary says version $(jq -r .version <<<"$out"), want $version"
[ "$(jq -r .platform <<<"$out")" = linux/arm64 ] || fail "the arm64 binary says platform $(jq -r .platform <<<"$out"), want linux/arm64"
echo "release-test: images: $(for f in "${images[@]}"; do printf '%s %d MB, ' "${f#dist/}" $(($(stat -c %s "$f") / 1000000)); done)digests $(echo $second | tr '\n' ' ') the same twice; the second build took $((rebuilt - snap)) s"
