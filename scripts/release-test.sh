#!/usr/bin/env bash
# Tests the release (make test runs it, after the image's test): what make
# release-snapshot leaves in dist/, checked piece by piece as a partner's
# operator would check it, without this repository's help where a user has
# none (docs/releases.md: its commands are run here as written).
#
#   1. the images: an OCI archive per architecture and the index over both;
#      built a second time, the same digests; the arm64 root holds only
#      aarch64 files, and its binary, run by qemu-aarch64 on the image's
#      own root (-L), says the archive's version and linux/arm64. The
#      arm64 Debian package: dpkg-deb says arm64, its ELF files are
#      aarch64's, its binary runs the same way, and lintian passes it with
#      the amd64 package's suppressions (scripts/lintian.sh).
#   2. the SBOMs: each binary's (from its archive) against `go version -m`
#      of that binary, each image's against the Debian packages and the
#      binary of the root read back from the image; an SBOM naming a
#      module the binary does not hold refused in one line.
#   3. dist/checksums.txt: sha256sum -c, every archive, image and SBOM in it.
#   4. signatures: a distribution registry (tools/registry) on loopback
#      receives the index and both images (scripts/release-publish.sh signs
#      them, attests their provenance and SBOMs, attaches the SBOMs as OCI
#      referrers); each image's SBOM read back through the referrers API
#      (GET /v2/NAME/referrers/DIGEST) is dist/'s, an SBOM referrer
#      attached to another image or with a changed byte refused in one
#      line; docs/releases.md's commands for a download, an image and an
#      image's SBOM pass as written; a changed
#      byte in checksums.txt, a signature by another key and an image with
#      a changed layer behind the same tag each fail. The chart: pushed to
#      the registry as OCI, signed, pulled back and rendered (docs/releases.md).
#
# Each failure says what is wrong and exits 1.
. "$(dirname "$0")/lib.sh"
need skopeo qemu-aarch64 readelf jq go
start=$(date +%s)
tmp=$(mktemp -d /tmp/signagent-release-test.XXXXXX)
registry=
cleanup() {
	set +e
	[ -n "$registry" ] && kill "$registry" && wait "$registry" 2>/dev/null
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

# aarch64_only DIR WHAT MIN: every ELF file under DIR is AArch64's, and
# there are at least MIN.
aarch64_only() {
	local f m n=0
	while IFS= read -r -d '' f; do
		m=$(readelf -h "$f" 2>/dev/null | sed -n "s/^ *Machine: *//p" || true)
		[ -z "$m" ] && continue
		n=$((n + 1))
		[ "$m" = AArch64 ] || fail "$2 holds ${f#"$1"}, built for $m"
	done < <(find "$1" -type f -print0)
	[ "$n" -ge "$3" ] || fail "$2 holds $n ELF files, want at least $3"
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
# Nothing below writes dist/, build/image or podman's images: the file
# RELEASE_TEST_BUILT names is made now, and make test starts the image's
# and the package's tests on what the release built beside the checks
# below (scripts/test.sh).
[ -z "${RELEASE_TEST_BUILT:-}" ] || : > "$RELEASE_TEST_BUILT"
# The arm64 root, read back from its image: aarch64 files alone, and its
# binary runs on it under qemu.
unpack "dist/signagent_${version}_arm64.oci.tar" "$tmp/arm64"
# (5: the binary, the loader and the libraries.)
aarch64_only "$tmp/arm64" "the arm64 image" 5
out=$(qemu-aarch64 -L "$tmp/arm64" "$tmp/arm64/usr/bin/signagent" version --json) || fail "the arm64 binary under qemu-aarch64 failed: $out"
[ "$(jq -r .version <<<"$out")" = "$version" ] || fail "the arm64 binary says version $(jq -r .version <<<"$out"), want $version"
[ "$(jq -r .platform <<<"$out")" = linux/arm64 ] || fail "the arm64 binary says platform $(jq -r .platform <<<"$out"), want linux/arm64"
# The arm64 Debian package, cross-built as the image's binary is: its
# binary run on the image's arm64 root.
debstart=$(date +%s)
deb=$(ls dist/signagent_*_arm64.deb 2>/dev/null) && [ "$(wc -l <<<"$deb")" = 1 ] || fail "make release-snapshot left no one dist/signagent_*_arm64.deb: $deb"
[ "$(dpkg-deb -f "$deb" Architecture)" = arm64 ] || fail "$deb says Architecture $(dpkg-deb -f "$deb" Architecture), want arm64"
dpkg-deb -x "$deb" "$tmp/deb-arm64"
aarch64_only "$tmp/deb-arm64" "$deb" 1
out=$(qemu-aarch64 -L "$tmp/arm64" "$tmp/deb-arm64/usr/bin/signagent" version --json) || fail "$deb's binary under qemu-aarch64 failed: $out"
[ "$(jq -r .platform <<<"$out")" = linux/arm64 ] || fail "$deb's binary says platform $(jq -r .platform <<<"$out"), want linux/arm64"
[ "$(jq -r .version <<<"$out" | sed 's/^v//')" = "$version" ] || fail "$deb's binary says version $(jq -r .version <<<"$out"), want $version"
out=$(scripts/lintian.sh "$deb" 2>&1) || fail "$out"
debend=$(date +%s)
echo "release-test: images: $(for f in "${images[@]}"; do printf '%s %d MB, ' "${f#dist/}" $(($(stat -c %s "$f") / 1000000)); done)digests $(echo $second | tr '\n' ' ') the same twice; the second build took $((rebuilt - snap)) s; $deb checked in $((debend - debstart)) s"

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
	# goreleaser's way (.goreleaser.yaml's sboms "images"): the base root
	# and the binary given as a file of its own make the same document.
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) $release sbom-image -out "$tmp/goreleaser-$a.spdx.json" -version "$version" -arch "$a" \
		-binary-file "$bin" "build/image/$a/root" || fail "sbom-image -binary-file failed for $a"
	cmp -s "$tmp/goreleaser-$a.spdx.json" "$isbom" || fail "the $a image's SBOM made as goreleaser makes it differs from $isbom"
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
for f in dist/signagent_${version}_linux_{amd64,arm64}.tar.gz dist/signagent_${version}{,_amd64,_arm64}.oci.tar dist/*.spdx.json dist/signagent_*_{amd64,arm64}.deb; do
	grep -q "^[0-9a-f]\{64\}  ${f#dist/}\$" dist/checksums.txt || fail "dist/checksums.txt does not name ${f#dist/}"
done
echo "release-test: SBOMs and checksums.txt: ok ($(wc -l < dist/checksums.txt) files)"

# 4. Signatures, provenance, SBOMs in a registry.
cosign=$(go -C tools/cosign tool -n cosign) || fail "building cosign (tools/cosign) failed"
mkdir -p "$tmp/bin"
ln -s "$cosign" "$tmp/bin/cosign"
ln -s "$(go -C tools/helm tool -n helm)" "$tmp/bin/helm"
port=25000
while (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; do port=$((port + 1)); done
cat > "$tmp/registry.yml" <<YML
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $tmp/registry
http:
  addr: 127.0.0.1:$port
YML
"$(go -C tools/registry tool -n registry)" serve "$tmp/registry.yml" >"$tmp/registry.log" 2>&1 &
registry=$!
for _ in $(seq 300); do curl -sf -o /dev/null "http://127.0.0.1:$port/v2/" && break; sleep 0.1; done
curl -sf -o /dev/null "http://127.0.0.1:$port/v2/" || fail "the registry did not start: $(tail -n 3 "$tmp/registry.log")"
repo=127.0.0.1:$port/signagent/signagent
ref=$(scripts/release-publish.sh "$repo") || fail "scripts/release-publish.sh $repo failed"
published=$(date +%s)

# block NAME: the commands of docs/releases.md's block marked NAME.
block() {
	awk -v m="<!-- release-test: $1 -->" '$0 == m {f = 1; next} f && /^```sh/ {g = 1; next} g && /^```/ {exit} g {print}' docs/releases.md
}
# run_block NAME DIR: runs them in DIR with cosign on the PATH, each
# command's failure fatal; prints their output.
run_block() {
	local cmds
	cmds=$(block "$1")
	[ "$(grep -c . <<<"$cmds")" = 3 ] || fail "docs/releases.md's $1 block has not three commands: $cmds"
	local out
	out=$(cd "$2" && PATH=$tmp/bin:$PATH VERSION=$version IMAGE=${IMAGE:-} IMAGE_ARCH=${IMAGE_ARCH:-} CHART=${CHART:-} \
		CHART_VERSION=${CHART_VERSION:-} REGISTRY_URL=${REGISTRY_URL:-} REPOSITORY=${REPOSITORY:-} DIGEST=${DIGEST:-} ARCH=${ARCH:-} PLAIN_HTTP=1 bash -euo pipefail -c "$cmds" 2>&1) ||
		fail "docs/releases.md's commands to verify $1 failed: $(grep -v '^WARNING' <<<"$out" | tail -n 2 | tr '\n' ' ')"
	printf '%s\n' "$out"
}
mkdir -p "$tmp/download"
cp dist/checksums.txt dist/checksums.txt.sig dist/cosign.pub "dist/signagent_${version}_linux_amd64.tar.gz" "$tmp/download/"
out=$(run_block download "$tmp/download")
grep -q '^Verified OK' <<<"$out" || fail "verify-blob did not say Verified OK: $out"
grep -q "^signagent_${version}_linux_amd64.tar.gz: OK" <<<"$out" || fail "sha256sum -c did not check the archive: $out"
grep -q "$version" <<<"$out" || fail "the downloaded binary does not say version $version: $out"
arm=$repo@sha256:$(skopeo inspect --raw "oci-archive:dist/signagent_${version}_arm64.oci.tar" | sha256sum | cut -d' ' -f1)
out=$(IMAGE=$ref IMAGE_ARCH=$arm run_block image dist)
grep -q "\"docker-manifest-digest\":\"${ref#*@}\"" <<<"$out" || fail "cosign verify did not verify the index ${ref#*@}: $out"
# The SBOMs as OCI referrers, per architecture: read back through the
# registry's referrers API, dist/'s very bytes; docs/releases.md's commands
# fetch the same and check them against checksums.txt.
sbomstart=$(date +%s)
# sbom_referrer NAME DIGEST FILE: the registry lists one referrer of
# artifactType application/spdx+json for DIGEST, its manifest names DIGEST
# as its subject and its layer is FILE's bytes; else one line saying what
# is wrong, and 1. The list: GET /v2/NAME/referrers/DIGEST, or where the
# registry answers that with 404 (distribution v3.0.0 has no referrers
# API), the referrers tag schema's index, tagged sha256-HEX (the
# distribution spec's fallback, which clients read and write). Says which
# in $tmp/referrers.via.
sbom_referrer() {
	local api=http://127.0.0.1:$port/v2/$1 m l code
	code=$(curl -sS -o "$tmp/referrers.json" -w '%{http_code}' -H 'Accept: application/vnd.oci.image.index.v1+json' "$api/referrers/$2") ||
		{ echo "GET /v2/$1/referrers/$2 failed"; return 1; }
	echo "the referrers API" > "$tmp/referrers.via"
	if [ "$code" = 404 ]; then
		echo "the referrers tag schema (GET /v2/NAME/referrers/DIGEST: 404)" > "$tmp/referrers.via"
		code=$(curl -sS -o "$tmp/referrers.json" -w '%{http_code}' -H 'Accept: application/vnd.oci.image.index.v1+json' "$api/manifests/sha256-${2#sha256:}") ||
			{ echo "GET /v2/$1/manifests/sha256-${2#sha256:} failed"; return 1; }
		[ "$code" = 404 ] && echo '{"manifests": []}' > "$tmp/referrers.json"
	fi
	[ "$code" = 200 ] || [ "$code" = 404 ] || { echo "the referrers of $1@$2: HTTP $code"; return 1; }
	m=$(jq -r '.manifests[] | select(.artifactType == "application/spdx+json") | .digest' "$tmp/referrers.json")
	[ "$(grep -c . <<<"$m")" = 1 ] || { echo "the image $1@$2 has $(grep -c . <<<"$m") SBOM referrers (artifactType application/spdx+json) by $(cat "$tmp/referrers.via"), want 1"; return 1; }
	curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json' -o "$tmp/referrer.json" "$api/manifests/$m" || { echo "GET /v2/$1/manifests/$m failed"; return 1; }
	[ "sha256:$(sha256sum < "$tmp/referrer.json" | cut -d' ' -f1)" = "$m" ] || { echo "the SBOM referrer $m of $1@$2 is not the manifest by that digest"; return 1; }
	[ "$(jq -r .subject.digest "$tmp/referrer.json")" = "$2" ] || { echo "the SBOM referrer $m listed for $1@$2 names the subject $(jq -r .subject.digest "$tmp/referrer.json")"; return 1; }
	l=$(jq -r '[.layers[] | select(.mediaType == "application/spdx+json")] | if length == 1 then .[0].digest else "" end' "$tmp/referrer.json")
	[ -n "$l" ] || { echo "the SBOM referrer $m of $1@$2 has not one application/spdx+json layer"; return 1; }
	curl -fsSL -o "$tmp/referrer.spdx.json" "$api/blobs/$l" || { echo "GET /v2/$1/blobs/$l failed"; return 1; }
	cmp -s "$tmp/referrer.spdx.json" "$3" ||
		{ echo "the SBOM referrer $m of $1@$2 holds sha256:$(sha256sum < "$tmp/referrer.spdx.json" | cut -d' ' -f1), not $3 (sha256:$(sha256sum < "$3" | cut -d' ' -f1))"; return 1; }
}
name=${repo#*/}
declare -A imgdigest
for a in amd64 arm64; do
	imgdigest[$a]=sha256:$(skopeo inspect --raw "oci-archive:dist/signagent_${version}_$a.oci.tar" | sha256sum | cut -d' ' -f1)
	sbom=dist/signagent_${version}_$a.oci.spdx.json
	out=$(sbom_referrer "$name" "${imgdigest[$a]}" "$sbom") || fail "$out"
	mkdir -p "$tmp/sbom-$a"
	cp dist/checksums.txt "$tmp/sbom-$a/"
	out=$(REGISTRY_URL=http://127.0.0.1:$port REPOSITORY=$name DIGEST=${imgdigest[$a]} ARCH=$a run_block sbom "$tmp/sbom-$a")
	grep -q "^${sbom#dist/}: OK\$" <<<"$out" || fail "docs/releases.md's SBOM commands did not check ${sbom#dist/} against checksums.txt: $out"
	cmp -s "$tmp/sbom-$a/${sbom#dist/}" "$sbom" || fail "docs/releases.md's SBOM commands fetched for the $a image another file than $sbom"
done
# Refused: the amd64 image's SBOM attached to the arm64 image (the wrong
# digest) and a copy with a changed byte, each in a repository of its own
# holding both images.
bad=()
for c in wrong changed; do
	skopeo copy --quiet --all --preserve-digests --src-tls-verify=false --dest-tls-verify=false "docker://$repo@${ref#*@}" "docker://127.0.0.1:$port/bad/$c:x" >/dev/null ||
		fail "copying the images to bad/$c failed"
done
$release attach-sbom "127.0.0.1:$port/bad/wrong@${imgdigest[arm64]}" "dist/signagent_${version}_amd64.oci.spdx.json" >/dev/null || fail "attaching an SBOM to bad/wrong failed"
sed '0,/"SPDX-2.3"/s//"SPDX-2.4"/' "dist/signagent_${version}_amd64.oci.spdx.json" > "$tmp/changed.spdx.json"
[ "$(cmp -l "$tmp/changed.spdx.json" "dist/signagent_${version}_amd64.oci.spdx.json" | wc -l)" = 1 ] || fail "the changed SBOM differs in more than one byte"
$release attach-sbom "127.0.0.1:$port/bad/changed@${imgdigest[amd64]}" "$tmp/changed.spdx.json" >/dev/null || fail "attaching an SBOM to bad/changed failed"
for c in wrong changed; do
	if out=$(sbom_referrer "bad/$c" "${imgdigest[amd64]}" "dist/signagent_${version}_amd64.oci.spdx.json"); then
		fail "an SBOM referrer ($c) was accepted"
	fi
	[ "$(wc -l <<<"$out")" = 1 ] || fail "an SBOM referrer ($c): not one line: $out"
	bad+=("$c: $out")
done
sbomend=$(date +%s)
echo "release-test: SBOM referrers: both images' read back through $(cat "$tmp/referrers.via"), dist/'s bytes; refused: ${bad[0]}; ${bad[1]} ($((sbomend - sbomstart)) s)"
# The chart: pushed, signed, pulled back (the same bytes as dist/'s) and
# rendered with an example's values, by docs/releases.md's commands.
chart_version=$(sed -n 's/^version: *//p' deploy/helm/signagent/Chart.yaml)
[ -s "dist/signagent-$chart_version.tgz" ] || fail "dist/signagent-$chart_version.tgz is missing"
chart=127.0.0.1:$port/charts/signagent@sha256:$(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
	"http://127.0.0.1:$port/v2/charts/signagent/manifests/$chart_version" | sha256sum | cut -d' ' -f1)
mkdir -p "$tmp/chart"
cp dist/cosign.pub "$tmp/chart/"
cp deploy/helm/signagent/values-oidc-redis.yaml "$tmp/chart/my-values.yaml"
out=$(CHART=$chart CHART_VERSION=$chart_version run_block chart "$tmp/chart")
cmp -s "$tmp/chart/signagent-$chart_version.tgz" "dist/signagent-$chart_version.tgz" || fail "the chart pulled back differs from dist/signagent-$chart_version.tgz"
grep -q "image: \"ghcr.io/signagent/signagent:" <<<"$out" || fail "the pulled chart does not render the image ghcr.io/signagent/signagent: $(grep 'image:' <<<"$out")"
grep -q '^    helm.sh/hook: test$' <<<"$out" || fail "the pulled chart renders no helm test hook (templates/tests/ready.yaml)"
# refused CMD...: the command fails, and its one error line is printed.
refused() {
	local out
	if out=$(PATH=$tmp/bin:$PATH "$@" 2>&1); then
		fail "accepted, want refused: $*"
	fi
	grep -v '^WARNING' <<<"$out" | grep -m1 '^Error: ' || fail "refused without an Error: line: $*: $out"
}
# A changed byte in checksums.txt.
cp dist/checksums.txt "$tmp/download/checksums.txt"
sed -i '1s/^./x/' "$tmp/download/checksums.txt"
why1=$(refused cosign verify-blob --key dist/cosign.pub --signature dist/checksums.txt.sig --insecure-ignore-tlog "$tmp/download/checksums.txt")
# A signature by another key.
(cd "$tmp" && COSIGN_PASSWORD=other "$cosign" generate-key-pair --output-key-prefix other >/dev/null 2>&1) || fail "cosign generate-key-pair failed"
COSIGN_PASSWORD=other "$cosign" sign-blob --yes --tlog-upload=false --key "$tmp/other.key" --output-signature "$tmp/other.sig" dist/checksums.txt >/dev/null 2>&1 ||
	fail "cosign sign-blob with another key failed"
why2=$(refused cosign verify-blob --key dist/cosign.pub --signature "$tmp/other.sig" --insecure-ignore-tlog dist/checksums.txt)
# An image with a changed byte in its layer, pushed behind the release's
# tag: the tag's image no longer verifies.
skopeo copy --quiet "oci-archive:dist/signagent_${version}_amd64.oci.tar" "oci:$tmp/bad:x" >/dev/null
m=$(jq -r '.manifests[0].digest' "$tmp/bad/index.json" | cut -d: -f2)
l=$(jq -r '.layers[0].digest' "$tmp/bad/blobs/sha256/$m" | cut -d: -f2)
printf '\x01' | dd of="$tmp/bad/blobs/sha256/$l" bs=1 seek=1000 conv=notrunc status=none
nl=$(sha256sum "$tmp/bad/blobs/sha256/$l" | cut -d' ' -f1)
mv "$tmp/bad/blobs/sha256/$l" "$tmp/bad/blobs/sha256/$nl"
sed "s/$l/$nl/" "$tmp/bad/blobs/sha256/$m" > "$tmp/bad/manifest"
nm=$(sha256sum "$tmp/bad/manifest" | cut -d' ' -f1)
mv "$tmp/bad/manifest" "$tmp/bad/blobs/sha256/$nm" && rm "$tmp/bad/blobs/sha256/$m"
sed -i "s/$m/$nm/" "$tmp/bad/index.json"
skopeo copy --quiet --preserve-digests --dest-tls-verify=false "oci:$tmp/bad:x" "docker://$repo:$version" >/dev/null ||
	fail "pushing the changed image failed"
why3=$(refused cosign verify --key dist/cosign.pub --insecure-ignore-tlog "$repo:$version")
end=$(date +%s)
echo "release-test: signatures: verify, verify-attestation, verify-blob pass; refused: changed checksums.txt ($why1), another key ($why2), changed layer ($why3); registry part $((end - published)) s after publishing"
echo "release-test: passed in $((end - start)) s"
