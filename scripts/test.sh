#!/bin/sh
# The test target's steps (make test, the CI gate), with the Helm chart's
# checks (tools/helm: helm and client-go take minutes to compile on a new
# machine) run beside the Go tests instead of after them: on two cores the
# race-detector suite spends much of its time waiting on tokens, servers
# and timers. Every step's failure fails the whole; the chart's output is
# printed when it fails.
set -eu
GO=${GO:-go}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
(cd tools/helm && $GO vet . && $GO test -count=1 .) >"$log" 2>&1 &
helm=$!
status=0
$GO test -race -count=1 -timeout 30m ./... || status=1
$GO test -run '^$' -fuzz '^FuzzUpstream$' -fuzztime 8s -fuzzminimizetime 10x ./agent/proxy || status=1
if wait "$helm"; then
	tail -n 1 "$log"
else
	echo "the Helm chart's checks (tools/helm) failed:"
	cat "$log"
	status=1
fi
[ "$status" = 0 ] || exit 1
scripts/package-test.sh
scripts/package-install-test.sh
scripts/image-test.sh
