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
#   2. the SBOMs: each binary's (from its archive) against `go version -m`
#      of that binary, each image's against the Debian packages and the
#      binary of the root read back from the image; an SBOM naming a
#      module the binary does not hold refused in one line.
#   3. dist/checksums.txt: sha256sum -c, every archive, image and SBOM in it.
#
# Each failure says what is wrong and exits 1.
. "$(dirname "$0")/lib.sh"
need skopeo qemu-aarch64 readelf jq go
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
# A second build of the same commit: the same digests. (The archives' own
# tar headers are dated by the build: the first build's files are put
# back, as dist/checksums.txt names them.)
mkdir -p "$tmp/first"
cp "${images[@]}" "$index" "$tmp/first/"
scripts/image.sh >"$tmp/image2.log" 2>&1 || fail "the second image build failed: $(tail -n 5 "$tmp/image2.log")"
second=$(digests "${images[@]}" "$index")
cp "$tmp/first"/* dist/
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

# 2. The SBOMs.
release=build/tools/release
[ -x $release ] || fail "make release-snapshot left no $release"
for a in amd64 arm64; do
	archive=dist/signagent_${version}_linux_$a.tar.gz
	sbom=dist/signagent_${version}_linux_$a.spdx.json
	[ -s "$archive" ] && [ -s "$sbom" ] || fail "$archive or $sbom is missing"
	mkdir -p "$tmp/archive-$a"
	tar -C "$tmp/archive-$a" -xzf "$archive"
	bin=$tmp/archive-$a/signagent_${version}_linux_$a/signagent
	[ -x "$bin" ] || fail "$archive holds no signagent"
	# What Go's own tool reads from the binary, against the SBOM.
	want=$(go version -m "$bin" | awk '$1 == "dep" && $4 != "=>" {print $2, $3} $1 == "=>" {print $2, $3}' | sort)
	[ -n "$want" ] || fail "go version -m found no modules in $bin"
	got=$(jq -r '.packages[] | select(.primaryPackagePurpose == "LIBRARY" and .name != "stdlib") | "\(.name) \(.versionInfo)"' "$sbom" | sort)
	[ "$want" = "$got" ] || fail "$sbom does not list the modules of $archive's binary: $(diff <(echo "$want") <(echo "$got") | grep '^[<>]' | tr '\n' ' ')"
	jq -e --arg v "$(go version "$bin" | awk '{print $2}')" '.packages[] | select(.externalRefs[]?.referenceLocator == "pkg:golang/stdlib@" + $v)' "$sbom" >/dev/null ||
		fail "$sbom does not name Go's standard library at the binary's $(go version "$bin")"
	out=$($release check-binary "$sbom" "$bin" 2>&1) || fail "$out"
	# The image's SBOM against the root in the image.
	isbom=dist/signagent_${version}_$a.oci.spdx.json
	[ -d "$tmp/$a" ] || unpack "dist/signagent_${version}_$a.oci.tar" "$tmp/$a"
	want=$(for f in "$tmp/$a"/var/lib/dpkg/status.d/*; do printf '%s %s\n' "$(sed -n 's/^Package: //p' "$f")" "$(sed -n 's/^Version: //p' "$f")"; done | sort)
	got=$(jq -r '.packages[] | select(.supplier == "Organization: Debian") | "\(.name) \(.versionInfo)"' "$isbom" | sort)
	[ "$want" = "$got" ] || fail "$isbom does not list the Debian packages of the $a image: $(diff <(echo "$want") <(echo "$got") | grep '^[<>]' | tr '\n' ' ')"
	[ "$(echo "$want" | wc -l)" -ge 5 ] || fail "the $a image names only $(echo "$want" | wc -l) Debian packages"
	jq -e '[.packages[] | select(.supplier == "Organization: Debian") | .licenseDeclared] | all(. != "NOASSERTION" and . != "")' "$isbom" >/dev/null ||
		fail "$isbom leaves a Debian package without a licence"
	out=$($release check-image "$isbom" "$tmp/$a" 2>&1) || fail "$out"
done
# An SBOM naming a module the binary does not hold: refused in one line.
jq '.packages += [{"name": "example.com/not/linked", "SPDXID": "SPDXRef-x", "versionInfo": "v1.0.0", "downloadLocation": "NOASSERTION",
	"filesAnalyzed": false, "licenseConcluded": "NOASSERTION", "licenseDeclared": "NOASSERTION", "copyrightText": "NOASSERTION",
	"primaryPackagePurpose": "LIBRARY", "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
	"referenceLocator": "pkg:golang/example.com/not/linked@v1.0.0"}]}]' "dist/signagent_${version}_linux_amd64.spdx.json" > "$tmp/bad.spdx.json"
if out=$($release check-binary "$tmp/bad.spdx.json" "$tmp/archive-amd64/signagent_${version}_linux_amd64/signagent" 2>&1); then
	fail "an SBOM naming a module the binary does not hold was accepted"
fi
[ "$(echo "$out" | wc -l)" = 1 ] && grep -q 'pkg:golang/example.com/not/linked@v1.0.0' <<<"$out" ||
	fail "an SBOM naming a module the binary does not hold: not one line naming it: $out"

# 3. The checksums.
[ -s dist/checksums.txt ] || fail "dist/checksums.txt is missing"
out=$(cd dist && sha256sum --strict -c checksums.txt 2>&1) || fail "sha256sum -c dist/checksums.txt: $(grep -v ': OK$' <<<"$out" | head -n 3)"
for f in dist/signagent_${version}_linux_{amd64,arm64}.tar.gz dist/signagent_${version}{,_amd64,_arm64}.oci.tar dist/*.spdx.json dist/signagent_*.deb; do
	grep -q "^[0-9a-f]\{64\}  ${f#dist/}\$" dist/checksums.txt || fail "dist/checksums.txt does not name ${f#dist/}"
done
echo "release-test: SBOMs and checksums.txt: ok ($(wc -l < dist/checksums.txt) files)"
