#!/bin/sh
# version-check.sh [VERSION]: docs/openapi.yaml's info.version is the
# release the CHANGELOG's top section names ("Unreleased" until a release);
# given a VERSION (goreleaser's before hook, from the tag), both must be it,
# so that no release ships with a document or a changelog that names
# another one.
set -eu
cd "$(dirname "$0")/.."
top=$(sed -n 's/^## \[\([^]]*\)\].*/\1/p' CHANGELOG.md | head -n 1)
api=$(sed -n '/^info:/,/^[a-z]/s/^  version: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' docs/openapi.yaml | head -n 1)
[ -n "$top" ] || { echo "version-check: CHANGELOG.md has no ## [VERSION] section" >&2; exit 1; }
want=$top
[ "$top" = Unreleased ] && want=unreleased
if [ "$api" != "$want" ]; then
	echo "version-check: docs/openapi.yaml info.version is \"$api\"; the CHANGELOG's top section is [$top], so it must be \"$want\"" >&2
	exit 1
fi
if [ $# -gt 0 ] && [ "$top" != "$1" ]; then
	echo "version-check: releasing $1, but the CHANGELOG's top section is [$top] (and info.version \"$api\"): name the release in both" >&2
	exit 1
fi
