#!/bin/sh
# Builds the Debian package of signagent into dist/ (make package): the
# binary (cgo: miekg/pkcs11 loads PKCS#11 modules with dlopen), its shell
# completions and manual page made by the binary itself, the system units
# with the installed path, then nfpm (pinned, from the Go module proxy).
# With --stage it only stages build/pkgroot (goreleaser's before hook).
# SIGNAGENT_VERSION overrides the version git describe gives (the package's
# install test builds a newer package with it).
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
root=build/pkgroot
rm -rf "$root" dist/signagent_*.deb
mkdir -p "$root/system"
CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -fstack-protector-strong -fstack-clash-protection -fcf-protection -D_FORTIFY_SOURCE=2" \
	$GO build -buildmode=pie -trimpath -ldflags "-s -w -X main.version=$version -X main.commit=$(git rev-parse HEAD 2>/dev/null) -linkmode=external -extldflags=-Wl,-z,relro,-z,now" \
	-o "$root/signagent" ./cmd/signagent
# What dh_strip removes besides the symbols: the compilers' notes (.comment).
objcopy --remove-section=.comment "$root/signagent"
"$root/signagent" completion bash > "$root/signagent.bash"
"$root/signagent" completion zsh > "$root/_signagent"
"$root/signagent" completion fish > "$root/signagent.fish"
"$root/signagent" man | gzip -9n > "$root/signagent.1.gz"
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
mkdir -p dist
SIGNAGENT_DEB_VERSION=$deb_version SIGNAGENT_DEB_ARCH=$($GO env GOARCH) \
	GOFLAGS=-mod=mod $GO run $NFPM package --config packaging/nfpm.yaml --packager deb --target dist/
ls dist/*.deb
