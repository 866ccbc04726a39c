#!/bin/sh
# Builds the Debian package of signagent into dist/ (make package): the
# binary (cgo: miekg/pkcs11 loads PKCS#11 modules with dlopen), its shell
# completions and manual page made by the binary itself, the system units
# with the installed path, then nfpm (pinned, from the Go module proxy).
# With --stage it only stages build/pkgroot (goreleaser's before hook).
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-go}
NFPM=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.41.1
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
case $version in
v[0-9]*) deb_version=${version#v} ;;
*) deb_version=0.0.0~git$(echo "$version" | tr -c 'A-Za-z0-9.+~\n' '.') ;;
esac
root=build/pkgroot
rm -rf "$root" dist/signagent_*.deb
mkdir -p "$root/system"
CGO_ENABLED=1 $GO build -buildmode=pie -trimpath -ldflags "-s -w -X main.version=$version" -o "$root/signagent" ./cmd/signagent
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
sed '/^ExecStart=/s|/usr/local/bin/signagent|/usr/bin/signagent|' deploy/signagent.service > "$root/system/signagent.service"
[ "${1:-}" = --stage ] && exit 0
mkdir -p dist
SIGNAGENT_DEB_VERSION=$deb_version SIGNAGENT_DEB_ARCH=$($GO env GOARCH) \
	GOFLAGS=-mod=mod $GO run $NFPM package --config packaging/nfpm.yaml --packager deb --target dist/
ls dist/*.deb
