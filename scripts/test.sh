#!/bin/sh
# The test target's steps (make test, the CI gate). The static checks
# (make lint) and the Helm chart's checks (tools/helm: helm and client-go
# take minutes to compile on a new machine) run beside the race-detector
# suite instead of before and after it: on two cores that suite spends much
# of its time waiting on tokens, servers and timers. Every step's failure
# fails the whole; a background step's output is printed when it fails.
# Then the Debian package and the container image, which need the machine
# to themselves less than they need the binaries built.
set -eu
GO=${GO:-go}
MAKE=${MAKE:-make}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
$MAKE --no-print-directory lint GO="$GO" >"$dir/lint" 2>&1 &
lint=$!
(cd tools/helm && $GO vet . && $GO test -count=1 .) >"$dir/helm" 2>&1 &
helm=$!
status=0
$GO test -race -count=1 -timeout 30m ./... || status=1
$GO test -run '^$' -fuzz '^FuzzUpstream$' -fuzztime 8s -fuzzminimizetime 10x ./agent/proxy || status=1
for step in lint helm; do
	eval pid=\$$step
	if wait "$pid"; then
		echo "$step: ok"
	else
		echo "$step failed:"
		cat "$dir/$step"
		status=1
	fi
done
[ "$status" = 0 ] || exit 1
scripts/package-test.sh
scripts/package-install-test.sh
scripts/image-test.sh
