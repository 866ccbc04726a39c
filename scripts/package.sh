#!/bin/sh
# Builds the Debian package of signagent into dist/ (make package): the
# binary (cgo: miekg/pkcs11 loads PKCS#11 modules with dlopen), its shell
# completions and manual page made by the binary itself, the system units
# with the installed path, then nfpm (pinned, from the Go module proxy).
# With --stage it only stages build/pkgroot (goreleaser's before hook).
# SIGNAGENT_VERSION overrides the version git describe gives (the package's
# install test builds a newer package with it).
#
# PACKAGE_ARCH=arm64 (or amd64 on an arm64 machine) builds the other
# architecture's package (make release-snapshot builds both): the binary
# cross-compiled with cgo by Debian's cross compiler (gcc-aarch64-linux-gnu,
# as scripts/image.sh builds the arm64 image's), its completions and manual
# page made by that binary under qemu-aarch64 (Debian's qemu-user) on the
# cross compiler's C library. The machine's own architecture's build
# removes every dist/signagent_*.deb first (make package leaves one); the
# other's removes only its own.
#
# BUILD_DIR and DIST_DIR put the staged root and the package there instead
# of build/ and dist/ (make test builds the package's tests' packages
# beside the release's).
#
# The binary is hardened as Debian's own packages are (dpkg-buildflags):
# full RELRO and immediate binding (-z relro -z now, which the external
# linker of a cgo PIE applies to the whole binary), and the C parts (cgo)
# with the stack protector, stack clash protection, CET and
# _FORTIFY_SOURCE. hardening-check (devscripts) reports all but control
# flow integrity, which Go's own code has no instructions for.
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-go}
NFPM=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.41.1
version=${SIGNAGENT_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
case $version in
v[0-9]*) deb_version=${version#v} ;;
*) deb_version=0.0.0~git$(echo "$version" | tr -c 'A-Za-z0-9.+~\n' '.') ;;
esac
host=$($GO env GOHOSTARCH)
arch=${PACKAGE_ARCH:-$host}
# The C compiler, its hardening flag for control flow (CET on amd64, PAC
# and BTI on arm64) and how the binary is run here.
case $arch in
amd64) cflags=-fcf-protection cross=x86_64-linux-gnu- qemu=qemu-x86_64 ;;
arm64) cflags=-mbranch-protection=standard cross=aarch64-linux-gnu- qemu=qemu-aarch64 ;;
*) echo "package: no package for $arch: amd64 or arm64" >&2; exit 1 ;;
esac
run=
if [ "$arch" = "$host" ]; then
	cross=
else
	for t in "${cross}gcc" "$qemu"; do
		command -v "$t" >/dev/null || { echo "package: $t is missing: scripts/deps.sh installs it (Makefile IMAGE_DEPS; make release-snapshot runs it)" >&2; exit 1; }
	done
	run="$qemu -L /usr/${cross%-}"
fi
build=${BUILD_DIR:-build}
dist=${DIST_DIR:-dist}
root=$build/pkgroot
if [ "$arch" = "$host" ]; then rm -f "$dist"/signagent_*.deb; else rm -f "$dist"/signagent_*_"$arch".deb; fi
rm -rf "$root"
mkdir -p "$root/system"
CGO_ENABLED=1 GOOS=linux GOARCH=$arch CC=${cross}gcc CGO_CFLAGS="-O2 -g -fstack-protector-strong -fstack-clash-protection $cflags -D_FORTIFY_SOURCE=2" \
	$GO build -buildmode=pie -trimpath -ldflags "-s -w -X main.version=$version -X main.commit=$(git rev-parse HEAD 2>/dev/null) -linkmode=external -extldflags=-Wl,-z,relro,-z,now" \
	-o "$root/signagent" ./cmd/signagent
# What dh_strip removes besides the symbols: the compilers' notes (.comment).
"${cross}objcopy" --remove-section=.comment "$root/signagent"
$run "$root/signagent" completion bash > "$root/signagent.bash"
$run "$root/signagent" completion zsh > "$root/_signagent"
$run "$root/signagent" completion fish > "$root/signagent.fish"
$run "$root/signagent" man | gzip -9n > "$root/signagent.1.gz"
gzip -9n < CHANGELOG.md > "$root/CHANGELOG.md.gz"
# A native package's changelog.gz is read as a Debian changelog: one entry
# pointing to the project's, dated by the commit (the build is repeatable).
{
	printf 'signagent (%s) unstable; urgency=medium\n\n' "$deb_version"
	printf '  * Built from %s; the changes are in CHANGELOG.md.gz.\n\n' "$version"
	printf ' -- signagent maintainers <security@signagent.invalid>  %s\n' "$(git log -1 --format=%aD 2>/dev/null || date -R)"
} | gzip -9n > "$root/changelog.gz"
sed 's|exec /usr/local/bin/signagent |exec /usr/bin/signagent |' deploy/signagent.service > "$root/system/signagent.service"
[ "${1:-}" = --stage ] && exit 0
mkdir -p "$dist"
# packaging/nfpm.yaml names the files in build/pkgroot: a copy of it
# naming $root (the same, unless BUILD_DIR is set).
config=$build/nfpm.yaml
sed "s|src: build/pkgroot/|src: $root/|" packaging/nfpm.yaml > "$config"
SIGNAGENT_DEB_VERSION=$deb_version SIGNAGENT_DEB_ARCH=$arch \
	GOFLAGS=-mod=mod $GO run $NFPM package --config "$config" --packager deb --target "$dist/"
ls "$dist"/signagent_*_"$arch".deb
