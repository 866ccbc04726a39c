#!/bin/sh
# lintian, pedantic, on a Debian package of signagent: scripts/package-test.sh
# runs it on the machine's architecture's, scripts/release-test.sh on the
# other's (arm64, cross-built), with the same suppressions:
#
#   scripts/lintian.sh DEB
#
# No tag at all but the one packaging/lintian/signagent overrides, with its
# reason (no init.d script). The spelling check of the binary is left out:
# Go's linker packs the binary's strings without separators, so lintian
# reads words across their joins (CI saw "addD": Redis command names side by
# side), and which joins appear changes with any build, so an override
# would be unused in the next (also a tag). Prints lintian's tags in one
# line and exits 1 if there is any.
set -eu
[ $# = 1 ] || { echo "usage: scripts/lintian.sh DEB" >&2; exit 2; }
rc=0
out=$(lintian --pedantic --display-info --fail-on error,warning,info,pedantic --tag-display-limit 0 \
	--suppress-tags spelling-error-in-binary "$1" 2>&1) || rc=$?
out=$(echo "$out" | grep -v 'running with root privileges' || true)
[ "$rc" = 0 ] && [ -z "$out" ] || { echo "lintian $1 (exit $rc): $(echo "$out" | tr '\n' ' ')" >&2; exit 1; }
