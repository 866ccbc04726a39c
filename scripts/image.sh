#!/usr/bin/env bash
# Builds the container images of signagent (make image) without a registry
# and without running anything inside them: for each architecture (amd64
# and arm64) a distroless root made from Debian's packages of that
# architecture (apt-get download with apt state of the build's own in
# build/apt/ARCH, so the host's dpkg is not given a foreign architecture,
# and dpkg-deb -x: the C library and loader, p11-kit's proxy and client
# modules and libffi, the Mozilla CA bundle, /etc/passwd with the user
# signagent, 65532), the binary built as the release builds it (arm64
# cross-compiled with cgo by Debian's gcc-aarch64-linux-gnu), then buildah
# bud --platform of deploy/container/Containerfile (FROM scratch, ADD and
# COPY alone: no binfmt is needed), an OCI archive for each architecture
# and one holding the OCI index over both in dist/.
#
#   scripts/image.sh                 both images and the index; prints
#                                    the host's image (localhost/signagent:VERSION),
#                                    its archive, the other's archive, the index's archive
#   scripts/image.sh --rootfs FILE [ARCH]  only the base root's tar of ARCH (default this machine's; goreleaser's before hook)
#   IMAGE_ARCHES="amd64"             fewer architectures (the first line is then the first's)
#                                    and last, localhost/signagent-emulator:VERSION (deploy/compose.yaml's
#                                    emulator, on the host's image)
#   BUILD_DIR=DIR DIST_DIR=DIR       the work and the archives there instead of build/ and
#                                    dist/ (make test builds the image's test's images beside
#                                    the release's); the apt lists stay in build/apt, one
#                                    build at a time (flock)
#
# Left for the tests and the SBOMs: build/image/ARCH/root (the root, with
# the binary at usr/bin/signagent) and build/image/ARCH/debs (BUILD_DIR's
# image/ARCH when it is set).
#
# Repeatable: the root's tar is sorted, owned by numbers and dated by the
# commit (SOURCE_DATE_EPOCH), the binary is built with -trimpath, and
# buildah stamps the image with the same date: two builds of one commit on
# the same Debian packages give the same image digests (scripts/release-test.sh
# builds twice and compares).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
fail() { echo "image: $*" >&2; exit 1; }
build=${BUILD_DIR:-build}
dist=${DIST_DIR:-dist}

# What the root holds, by package. The binary needs only the C library
# (cgo: miekg/pkcs11 dlopens the PKCS#11 module); p11-kit's proxy
# (libp11-kit0, with libffi8) and its client module (p11-kit-modules) let a
# module, a network HSM's or a card's, be mounted in or reached through
# p11-kit's RPC socket.
PACKAGES=(libc6 libp11-kit0 libffi8 p11-kit-modules ca-certificates)
UID_GID=65532

version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
version=${version#v}
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
host=$(dpkg --print-architecture)
read -r -a arches <<<"${IMAGE_ARCHES:-$host $([ "$host" = amd64 ] && echo arm64 || echo amd64)}"
[ "${1:-}" = --rootfs ] && arches=("${3:-$host}")

# apt_arch ARCH ARGS: apt-get (or apt-cache, as APT_CMD) for ARCH's
# packages, from the machine's Debian sources (deb822 or sources.list),
# with lists and caches of the build's own in build/apt/ARCH, updated
# when older than a day.
apt_arch() {
	local a=$1 cmd=${APT_CMD:-apt-get}
	shift
	local d=$PWD/build/apt/$a
	local opts=(-o "Dir::State::Lists=$d/lists" -o "Dir::State::status=$d/status" -o "Dir::Cache=$d/cache"
		-o "Dir::Etc::SourceParts=$d/sources.list.d" -o "Dir::Etc::SourceList=$d/sources.list"
		-o "APT::Architecture=$a" -o "APT::Architectures::=$a" -o "Acquire::Languages=none")
	if [ ! -d "$d/lists" ] || [ -z "$(find "$d/lists" -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -n1)" ]; then
		mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/sources.list.d"
		: > "$d/status"
		: > "$d/sources.list"
		# Debian's own sources only: a third party's (an amd64-only
		# repository) may have no arm64 lists.
		if [ -s /etc/apt/sources.list.d/debian.sources ]; then
			cp /etc/apt/sources.list.d/debian.sources "$d/sources.list.d/"
		else
			grep -hE '^[[:space:]]*deb[[:space:]].*debian' /etc/apt/sources.list > "$d/sources.list" || true
		fi
		chmod -R a+rwX "$d"
		apt-get "${opts[@]}" -q=2 update >&2 || fail "apt-get update for $a failed"
	fi
	"$cmd" "${opts[@]}" "$@"
}

# build_arch ARCH: the root, the binary and the image of ARCH; the image
# is localhost/signagent:VERSION-ARCH, its archive
# dist/signagent_VERSION_ARCH.oci.tar.
build_arch() {
	local arch=$1 cc=gcc cross= cflags
	local work=$build/image/$arch
	case $arch in
	amd64) cflags=-fcf-protection ;;
	arm64) cflags=-mbranch-protection=standard ;;
	*) fail "no image for $arch: amd64 or arm64" ;;
	esac
	if [ "$arch" != "$host" ]; then
		case $arch in arm64) cross=aarch64-linux-gnu- ;; amd64) cross=x86_64-linux-gnu- ;; esac
		cc=${cross}gcc
		command -v "$cc" >/dev/null || fail "$cc is missing: make deps installs it (gcc-${cross%-}; Makefile IMAGE_DEPS)"
	fi
	mkdir -p "$work/debs"

	# The packages, downloaded once per version into build/image/ARCH/debs
	# (apt-get download works as _apt in a directory it may write).
	chmod 0777 "$work/debs"
	debs=()
	local pkg ver a f
	# One build at a time reads and updates the apt lists of ARCH.
	mkdir -p build/apt
	exec 9>"build/apt/$arch.lock"
	flock 9
	for pkg in "${PACKAGES[@]}"; do
		ver=$(APT_CMD=apt-cache apt_arch "$arch" show --no-all-versions "$pkg:$arch" 2>/dev/null | sed -n 's/^Version: //p' | head -n1)
		[ -n "$ver" ] || fail "apt knows no package $pkg for $arch"
		a=$(APT_CMD=apt-cache apt_arch "$arch" show --no-all-versions "$pkg:$arch" | sed -n 's/^Architecture: //p' | head -n1)
		f="$work/debs/${pkg}_${ver//:/%3a}_$a.deb"
		if [ ! -s "$f" ]; then
			(cd "$work/debs" && apt_arch "$arch" download -q=2 "$pkg:$a=$ver") || fail "apt-get download $pkg:$a=$ver failed"
		fi
		debs+=("$f")
	done
	flock -u 9
	exec 9>&-

	# Unpack every package into one staging tree, then copy what is used.
	stage=$work/stage
	root=$work/root
	rm -rf "$stage" "$root"
	mkdir -p "$stage" "$root"
	for f in "${debs[@]}"; do dpkg-deb -x "$f" "$stage"; done
	triplet=$(cd "$stage/usr/lib" && ls -d ./*-linux-gnu* | head -n1) && triplet=${triplet#./}
	[ -n "$triplet" ] || fail "no multiarch library directory in the $arch packages"

	# The binary, built as goreleaser and make package build it (hardened:
	# scripts/package.sh says how); arm64 by Debian's cross compiler.
	mkdir -p "$work/ctx"
	CGO_ENABLED=1 GOOS=linux GOARCH=$arch CC=$cc \
		CGO_CFLAGS="-O2 -g -fstack-protector-strong -fstack-clash-protection $cflags -D_FORTIFY_SOURCE=2" \
		$GO build -buildmode=pie -trimpath -ldflags "-s -w -X main.version=$version -X main.commit=$revision -linkmode=external -extldflags=-Wl,-z,relro,-z,now" \
		-o "$work/ctx/signagent" ./cmd/signagent
	"${cross}objcopy" --remove-section=.comment "$work/ctx/signagent"

	# The loader (the program interpreter the binary names), the libraries of
	# the binary and of p11-kit's modules.
	local interp m
	interp=$(readelf -p .interp "$work/ctx/signagent" | sed -n 's/^ *\[ *[0-9]*\] *//p')
	copy "$interp"
	needs "$work/ctx/signagent"
	for m in "/usr/lib/$triplet/p11-kit-proxy.so" "/usr/lib/$triplet/libp11-kit.so.0" "/usr/lib/$triplet/pkcs11/p11-kit-client.so"; do
		copy "$m"
		needs "$stage$(realpath -m "$m")"
	done
	# The CA bundle update-ca-certificates makes from the same files (the
	# Mozilla set, nothing added), where Go and OpenSSL look for it.
	mkdir -p "$root/etc/ssl/certs"
	cat "$stage"/usr/share/ca-certificates/mozilla/*.crt > "$root/etc/ssl/certs/ca-certificates.crt"
	# Each package's copyright, and its control fields where scanners (trivy,
	# grype, syft) read a distroless image's packages.
	mkdir -p "$root/var/lib/dpkg/status.d"
	for f in "${debs[@]}"; do
		pkg=$(dpkg-deb -f "$f" Package)
		mkdir -p "$root/usr/share/doc/$pkg"
		cp "$stage/usr/share/doc/$pkg/copyright" "$root/usr/share/doc/$pkg/copyright"
		{ dpkg-deb -f "$f"; printf 'Status: install ok installed\n'; } > "$root/var/lib/dpkg/status.d/$pkg"
	done
	# The user signagent and the files a program of this kind expects.
	mkdir -p "$root/etc/pkcs11/modules" "$root/tmp" "$root/var/lib/signagent" "$root/run/signagent"
	printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nsignagent:x:%d:%d:signagent:/var/lib/signagent:/usr/sbin/nologin\n' $UID_GID $UID_GID > "$root/etc/passwd"
	printf 'root:x:0:\nsignagent:x:%d:\n' $UID_GID > "$root/etc/group"
	printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$root/etc/nsswitch.conf"
	printf 'PRETTY_NAME="signagent on Debian 12 packages (distroless)"\nID=debian\nVERSION_ID="12"\n' > "$root/etc/os-release"
	chmod 1777 "$root/tmp"
	chmod 0700 "$root/var/lib/signagent" "$root/run/signagent"

	# The root as a tar, repeatable: sorted, dated by the commit, owned by
	# numbers (root's; the state directories the user's), without running as
	# that user.
	local tarflags=(--sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime --format=gnu)
	local rootfs=$work/ctx/rootfs.tar
	tar -C "$root" "${tarflags[@]}" --owner=0 --group=0 \
		--exclude=./var/lib/signagent --exclude=./run/signagent -cf "$rootfs" .
	tar -C "$root" "${tarflags[@]}" --owner=$UID_GID --group=$UID_GID -rf "$rootfs" ./run/signagent ./var/lib/signagent
	# The binary in the root too, for the tests (qemu-aarch64 -L) and the
	# image's SBOM; the image takes it from the context (COPY).
	mkdir -p "$root/usr/bin"
	cp "$work/ctx/signagent" "$root/usr/bin/signagent"
	[ "${rootfs_out:-}" ] && return 0

	# The health check asks agent status --probe ready; a build without it
	# (older than the flag) is given no health check rather than a wrong one.
	cp deploy/container/Containerfile "$work/ctx/Containerfile"
	if [ "$arch" = "$host" ] && ! grep -q -- '--probe' <<<"$("$work/ctx/signagent" agent status --help 2>/dev/null)"; then
		echo "image: this build's agent status has no --probe: the image has no health check" >&2
		sed -i '/^HEALTHCHECK /d' "$work/ctx/Containerfile"
	fi
	local image=localhost/signagent:$version-$arch
	buildah --log-level error bud --quiet --layers=false --format docker --timestamp "$SOURCE_DATE_EPOCH" \
		--platform "linux/$arch" \
		--build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created" \
		--build-arg BASE="$(for f in "${debs[@]}"; do dpkg-deb --show --showformat='${Package}=${Version}\n' "$f"; done | paste -sd,)" \
		-t "$image" -f "$work/ctx/Containerfile" "$work/ctx" >/dev/null
	local out=$dist/signagent_${version}_$arch.oci.tar
	rm -f "$out"
	buildah --log-level error push --quiet --format oci "$image" "oci-archive:$out:signagent:$version"
}

# copy PATH: the file (and each link on the way to it) from the staging
# tree into the root, links kept as links.
copy() {
	local p=$1
	while :; do
		[ -e "$stage$p" ] || [ -L "$stage$p" ] || fail "$p is in none of ${PACKAGES[*]}"
		mkdir -p "$root$(dirname "$p")"
		cp -a "$stage$p" "$root$p"
		[ -L "$stage$p" ] || break
		local t
		t=$(readlink "$stage$p")
		case $t in /*) p=$t ;; *) p=$(dirname "$p")/$t ;; esac
		p=$(realpath -m -s "$p")
	done
}
# needs FILE: the libraries FILE links (readelf reads any architecture's),
# found in the staging tree, copied with what they link in turn.
needs() {
	local lib d
	for lib in $(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'); do
		for d in "/lib/$triplet" "/usr/lib/$triplet"; do
			if [ -e "$stage$d/$lib" ]; then
				if [ ! -e "$root$d/$lib" ]; then copy "$d/$lib" && needs "$stage$d/$lib"; fi
				continue 2
			fi
		done
		fail "$1 links $lib, which is in none of ${PACKAGES[*]}"
	done
}

if [ "${1:-}" = --rootfs ]; then
	[ -n "${2:-}" ] || fail "--rootfs needs a FILE"
	rootfs_out=$2
	build_arch "${3:-$host}"
	mkdir -p "$(dirname "$2")"
	cp "$build/image/${3:-$host}/ctx/rootfs.tar" "$2"
	exit 0
fi

command -v buildah >/dev/null || fail "buildah is missing: apt-get install buildah (make image-deps)"
mkdir -p "$dist"
rm -f "$dist"/signagent_*.oci.tar
for arch in "${arches[@]}"; do build_arch "$arch"; done

# The index over the architectures, an OCI image index in an archive of
# its own (buildah's manifest list, pushed with every image it names).
# (Named by this run: two builds at once each make their own.)
list=localhost/signagent-index:$version-$$
buildah manifest rm "$list" >/dev/null 2>&1 || true
buildah manifest create "$list" >/dev/null
for arch in "${arches[@]}"; do
	buildah manifest add --arch "$arch" --os linux "$list" "oci-archive:$dist/signagent_${version}_$arch.oci.tar" >/dev/null
done
index=$dist/signagent_${version}.oci.tar
buildah --log-level error manifest push --quiet --all --format oci "$list" "oci-archive:$index:signagent:$version"
buildah manifest rm "$list" >/dev/null

# The host's image also as localhost/signagent:VERSION (podman runs it).
buildah tag "localhost/signagent:$version-${arches[0]}" "localhost/signagent:$version"
# The emulator of the service, for deploy/compose.yaml's profile emulator:
# the host's image with signagent-emulator beside signagent, not in the
# shipped images nor in the archives.
mkdir -p "$build/image"
$GO build -trimpath -ldflags "-s -w" -o "$build/image/signagent-emulator" ./cmd/signagent-emulator
emulator=localhost/signagent-emulator:$version
c=$(buildah from --quiet "localhost/signagent:$version")
buildah copy --quiet "$c" "$build/image/signagent-emulator" /usr/bin/signagent-emulator >/dev/null
buildah config --healthcheck '' --entrypoint '["/usr/bin/signagent-emulator"]' --cmd '[]' \
	--label org.opencontainers.image.title=signagent-emulator "$c"
buildah commit --quiet --rm --timestamp "$SOURCE_DATE_EPOCH" "$c" "$emulator" >/dev/null
echo "localhost/signagent:$version"
for arch in "${arches[@]}"; do echo "$dist/signagent_${version}_$arch.oci.tar"; done
echo "$index"
echo "$emulator"
