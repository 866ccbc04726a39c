#!/usr/bin/env bash
# Makes a release's files in dist/ (make release-snapshot), without the
# release key: see docs/releases.md.
#
#   the images and their index      scripts/image.sh (amd64 and arm64)
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "release: $*" >&2; exit 1; }
scripts/image.sh >/dev/null || fail "the images failed (scripts/image.sh)"
