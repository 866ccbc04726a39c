#!/usr/bin/env bash
# Builds the container image of signagent (make image) without a registry:
# a distroless root made from Debian's packages (apt-get download and
# dpkg-deb -x: the C library and loader, p11-kit's proxy and client modules
# and libffi, the Mozilla CA bundle, /etc/passwd with the user signagent,
# 65532), the binary built as the release builds it, then buildah bud of
# deploy/container/Containerfile and an OCI archive in dist/.
#
#   scripts/image.sh                 the image localhost/signagent:VERSION and dist/signagent_VERSION_ARCH.oci.tar,
#                                    and localhost/signagent-emulator:VERSION (deploy/compose.yaml's emulator)
#   scripts/image.sh --rootfs FILE   only the base root's tar (goreleaser's before hook)
#
# Repeatable: the root's tar is sorted, owned by numbers and dated by the
# commit (SOURCE_DATE_EPOCH), the binary is built with -trimpath, and
# buildah stamps the image with the same date: two builds of one commit on
# the same Debian packages give the same image digest.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
fail() { echo "image: $*" >&2; exit 1; }

# What the root holds, by package. The binary needs only the C library
# (cgo: miekg/pkcs11 dlopens the PKCS#11 module); p11-kit's proxy
# (libp11-kit0, with libffi8) and its client module (p11-kit-modules) let a
# module, a network HSM's or a card's, be mounted in or reached through
# p11-kit's RPC socket.
PACKAGES=(libc6 libp11-kit0 libffi8 p11-kit-modules ca-certificates)
UID_GID=65532

version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
arch=$(dpkg --print-architecture)
work=build/image
mkdir -p "$work/debs"

# The packages, downloaded once per version into build/image/debs (apt-get
# download works as _apt in a directory it may write).
chmod 0777 "$work/debs"
debs=()
for pkg in "${PACKAGES[@]}"; do
	ver=$(apt-cache show --no-all-versions "$pkg" 2>/dev/null | sed -n 's/^Version: //p' | head -n1)
	[ -n "$ver" ] || fail "apt knows no package $pkg: run apt-get update"
	a=$(apt-cache show --no-all-versions "$pkg" | sed -n 's/^Architecture: //p' | head -n1)
	f="$work/debs/${pkg}_${ver//:/%3a}_$a.deb"
	if [ ! -s "$f" ]; then
		(cd "$work/debs" && apt-get download -q=2 "$pkg=$ver") || fail "apt-get download $pkg=$ver failed"
	fi
	debs+=("$f")
done

# Unpack every package into one staging tree, then copy what is used.
stage=$work/stage
root=$work/root
rm -rf "$stage" "$root"
mkdir -p "$stage" "$root"
for f in "${debs[@]}"; do dpkg-deb -x "$f" "$stage"; done
triplet=$(cd "$stage/usr/lib" && ls -d ./*-linux-gnu* | head -n1) && triplet=${triplet#./}
[ -n "$triplet" ] || fail "no multiarch library directory in the packages"

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
# needs FILE: the libraries FILE links, found in the staging tree, copied
# with what they link in turn.
needs() {
	local lib d
	for lib in $(objdump -p "$1" | awk '$1 == "NEEDED" {print $2}'); do
		for d in "/lib/$triplet" "/usr/lib/$triplet"; do
			if [ -e "$stage$d/$lib" ]; then
				if [ ! -e "$root$d/$lib" ]; then copy "$d/$lib" && needs "$stage$d/$lib"; fi
				continue 2
			fi
		done
		fail "$1 links $lib, which is in none of ${PACKAGES[*]}"
	done
}

# The binary, built as goreleaser and make package build it (hardened:
# scripts/package.sh says how).
mkdir -p "$work/ctx"
CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -fstack-protector-strong -fstack-clash-protection -fcf-protection -D_FORTIFY_SOURCE=2" \
	$GO build -buildmode=pie -trimpath -ldflags "-s -w -X main.version=$version -X main.commit=$(git rev-parse HEAD 2>/dev/null) -linkmode=external -extldflags=-Wl,-z,relro,-z,now" \
	-o "$work/ctx/signagent" ./cmd/signagent
objcopy --remove-section=.comment "$work/ctx/signagent"

# The loader (the program interpreter the binary names), the libraries of
# the binary and of p11-kit's modules.
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
tarflags=(--sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime --format=gnu)
rootfs=$work/ctx/rootfs.tar
tar -C "$root" "${tarflags[@]}" --owner=0 --group=0 \
	--exclude=./var/lib/signagent --exclude=./run/signagent -cf "$rootfs" .
tar -C "$root" "${tarflags[@]}" --owner=$UID_GID --group=$UID_GID -rf "$rootfs" ./run/signagent ./var/lib/signagent
if [ "${1:-}" = --rootfs ]; then
	[ -n "${2:-}" ] || fail "--rootfs needs a FILE"
	mkdir -p "$(dirname "$2")"
	cp "$rootfs" "$2"
	exit 0
fi

command -v buildah >/dev/null || fail "buildah is missing: apt-get install buildah (make image-deps)"
# The health check asks agent status --probe ready; a build without it
# (older than the flag) is given no health check rather than a wrong one.
cp deploy/container/Containerfile "$work/ctx/Containerfile"
if ! grep -q -- '--probe' <<<"$("$work/ctx/signagent" agent status --help 2>/dev/null)"; then
	echo "image: this build's agent status has no --probe: the image has no health check" >&2
	sed -i '/^HEALTHCHECK /d' "$work/ctx/Containerfile"
fi
image=localhost/signagent:$version
buildah --log-level error bud --quiet --layers=false --format docker --timestamp "$SOURCE_DATE_EPOCH" \
	--build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created" \
	--build-arg BASE="$(for f in "${debs[@]}"; do dpkg-deb --show --showformat='${Package}=${Version}\n' "$f"; done | paste -sd,)" \
	-t "$image" -f "$work/ctx/Containerfile" "$work/ctx" >/dev/null
mkdir -p dist
out=dist/signagent_${version#v}_$arch.oci.tar
rm -f dist/signagent_*.oci.tar
buildah --log-level error push --quiet "$image" "oci-archive:$out:signagent:$version"
# The emulator of the service, for deploy/compose.yaml's profile emulator:
# the same root with signagent-emulator beside signagent, not in the
# shipped image nor in the archive.
$GO build -trimpath -ldflags "-s -w" -o "$work/signagent-emulator" ./cmd/signagent-emulator
emulator=localhost/signagent-emulator:$version
c=$(buildah from --quiet "$image")
buildah copy --quiet "$c" "$work/signagent-emulator" /usr/bin/signagent-emulator >/dev/null
buildah config --healthcheck '' --entrypoint '["/usr/bin/signagent-emulator"]' --cmd '[]' \
	--label org.opencontainers.image.title=signagent-emulator "$c"
buildah commit --quiet --rm --timestamp "$SOURCE_DATE_EPOCH" "$c" "$emulator" >/dev/null
echo "$image"
echo "$out"
echo "$emulator"
