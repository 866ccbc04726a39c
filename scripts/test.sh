#!/bin/sh
# The test target's steps (make test, the CI gate), and with "check" as
# its argument the check target's (make check, the loop while working).
#
# The static checks (make lint), the Helm chart's checks (tools/helm:
# helm and client-go take minutes to compile on a new machine) and the
# alert rules' (promtool, deploy/monitoring) run beside
# the tests instead of before and after them: on two cores the tests spend
# much of their time waiting on tokens, servers and timers. For the same
# reason three test binaries run at a time (TEST_PACKAGES) and a package's
# parallel tests four at a time (TEST_PARALLEL), not one per core: they
# wait on the processes they start (on two cores, the race suite took
# 7 min 27 s with go test's defaults and 5 min 29 s so). Every step's failure
# fails the whole; a background step's output is printed when it fails.
#
# test: every test under the race detector (the command-line scripts
# without it, as the binary ships) and the proxy's upstream client fuzzed
# for 600 inputs (a few seconds), then the release, then the Debian
# package and, beside it, the container image, both as the release built
# them. check: every test once without the race detector, nothing after.
set -eu
# A program built with the race detector sleeps 1 s as it exits
# (atexit_sleep_ms, for goroutines still running to report a race): the
# tests start signagent (their own race-built binary) hundreds of times
# and wait for each, and cmd/signagent/scripts took 323 s with that
# second, 140 s without it, the same CPU. A race found still exits 66 and
# fails its test.
export GORACE="${GORACE:-atexit_sleep_ms=50}"
GO=${GO:-go}
MAKE=${MAKE:-make}
mode=${1:-test}
parallel=${TEST_PARALLEL:-4}
packages=${TEST_PACKAGES:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
$MAKE --no-print-directory lint GO="$GO" >"$dir/lint" 2>&1 &
lint=$!
(cd tools/helm && $GO vet . && $GO test -count=1 .) >"$dir/helm" 2>&1 &
helm=$!
# The release's tools (tools/release's own tests; cosign and the
# distribution registry, built into the Go build cache here, minutes on a
# new machine, so that scripts/release-test.sh finds them built).
(cd tools/release && $GO vet . && $GO test -count=1 . && $GO -C ../cosign tool -n cosign >/dev/null &&
	$GO -C ../registry tool -n registry >/dev/null) >"$dir/release_tools" 2>&1 &
release_tools=$!
# The monitoring kit's alert rules: promtool's own check, and their unit
# tests firing each alert (deploy/monitoring; docs/runbook.md).
(cd deploy/monitoring && promtool check rules signagent.rules.yaml && promtool test rules signagent.rules.test.yaml) >"$dir/monitoring" 2>&1 &
monitoring=$!
steps="lint helm monitoring release_tools"
if [ "$mode" != check ]; then
	# The package's install test's Debian root (mmdebstrap, about 90 s on
	# a new machine, mostly waiting on the network and dpkg) beside the Go
	# tests, which leave part of a core idle, instead of after them.
	scripts/package-install-test.sh --prepare >"$dir/pkgroot" 2>&1 &
	pkgroot=$!
	steps="$steps pkgroot"
fi
status=0
module=github.com/signagent/signagent
# The agent package's tests run one at a time: most load SoftHSM or OpenSC
# into the test process, which read their configuration from the
# environment once per process, so they set it and cannot be parallel.
# They take about 2 min, mostly waiting on cards, timers and a store
# outage, on about 20 s of CPU: alone, the package was the run's longest
# pole. Its test binary is built once and run as two processes beside the
# other packages: the card and store-outage tests (agent_slow_tests), and every
# other test (-test.skip, so that a new test runs in one of them).
agent_slow_tests='^(TestStoreOutageUnderLoad|TestCard)'
# run_agent_tests FLAGS...: builds the agent package's test binary (with
# FLAGS: -race) and starts its two processes; wait_agent_tests prints
# their results as go test would, and fails when either failed (or
# neither started: the build's errors are go test's own).
agent_pid_slow='' agent_pid_rest=''
run_agent_tests() {
	$GO test -c "$@" -o "$dir/agent.test" ./agent || return 1
	for shard in slow rest; do
		if [ "$shard" = slow ]; then select=-test.run; else select=-test.skip; fi
		(
			cd agent && start=$(date +%s)
			if "$dir/agent.test" -test.count=1 -test.paniconexit0 -test.parallel="$parallel" \
				-test.timeout="$timeout" "$select=$agent_slow_tests" >"$dir/agent.$shard" 2>&1; then
				printf 'ok  \t%s/agent (%s %s)\t%ds\n' "$module" "$select" "$agent_slow_tests" $(($(date +%s) - start)) >"$dir/agent.$shard.ok"
			fi
		) &
		eval "agent_pid_$shard=\$!"
	done
}
wait_agent_tests() {
	agent_status=0
	for shard in slow rest; do
		eval pid=\$agent_pid_$shard
		[ -z "$pid" ] || wait "$pid" || true
		if [ -e "$dir/agent.$shard.ok" ]; then
			cat "$dir/agent.$shard.ok"
		else
			[ ! -e "$dir/agent.$shard" ] || cat "$dir/agent.$shard"
			echo "FAIL	$module/agent (its $shard tests)"
			agent_status=1
		fi
	done
	return "$agent_status"
}
# The other packages, the longest first (go test runs them in the order
# given, three at a time), so that none is left to run alone at the end:
# cmd/signagent (and in check, its scripts), then $longest.
longest="./pkcs11/gosttoken ./pkcs11 ./oidc ./store ./agent/proxy ./trusted"
others=$($GO list ./... | grep -vx "$module/agent")
if [ "$mode" = check ]; then
	timeout=20m
	run_agent_tests || status=1
	$GO test -count=1 -p "$packages" -parallel "$parallel" -timeout "$timeout" \
		./cmd/signagent ./cmd/signagent/scripts $longest $others || status=1
	wait_agent_tests || status=1
else
	# The command-line scripts (cmd/signagent/scripts) run the binary as
	# it ships, without the race detector, beside the race run: they check
	# what a user sees (output, exit statuses, files), each command a
	# process of its own, and under the race detector they took 185 s of
	# CPU of the run's 720 on two cores. The race detector watches the same
	# commands in cmd/signagent's Go tests, in process and as processes.
	scripts=github.com/signagent/signagent/cmd/signagent/scripts
	$GO test -count=1 -parallel "$parallel" -timeout 20m "$scripts" >"$dir/scripts" 2>&1 &
	scripts_pid=$!
	timeout=30m
	run_agent_tests -race || status=1
	$GO test -race -count=1 -p "$packages" -parallel "$parallel" -timeout "$timeout" \
		./cmd/signagent $longest $(echo "$others" | grep -vx "$scripts") || status=1
	wait_agent_tests || status=1
	if wait "$scripts_pid"; then
		cat "$dir/scripts"
	else
		echo "the scripts (cmd/signagent/scripts) failed:"
		cat "$dir/scripts"
		status=1
	fi
	# A count, not a duration: with a duration Go 1.26's fuzzing coordinator
	# can report its own deadline as a failure when the machine is loaded
	# (golang/go#75804, fixed in Go 1.27); about 8 s here.
	$GO test -run '^$' -fuzz '^FuzzUpstream$' -fuzztime 600x -fuzzminimizetime 10x ./agent/proxy || status=1
fi
for step in $steps; do
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
[ "$mode" = check ] && exit 0
# The release first (make release-snapshot built twice, then checked piece
# by piece: scripts/release-test.sh); once its builds are done, beside its
# checks, the image's test and the package's, each on what the release
# built, the image and the package that ship, instead of building its own
# (an image and two packages, a minute of CPU): both mostly wait (systemd
# booting, containers starting). All three at once, each building, took
# longer (204 s) than in two steps (186 s): the builds contended for
# podman's storage and the two cores. When the release fails before its
# builds are done, each builds its own, after it.
(RELEASE_TEST_BUILT=$dir/built scripts/release-test.sh; echo $? >"$dir/release.rc") &
release=$!
while [ ! -e "$dir/built" ] && [ ! -e "$dir/release.rc" ]; do sleep 1; done
if [ -e "$dir/built" ]; then
	export IMAGE_TEST_FROM_RELEASE=1
	PACKAGE_TEST_DEB=$(ls dist/signagent_*_"$(dpkg --print-architecture)".deb)
	export PACKAGE_TEST_DEB
fi
scripts/image-test.sh >"$dir/image" 2>&1 &
image=$!
(scripts/package-test.sh && scripts/package-install-test.sh) >"$dir/package" 2>&1 &
package=$!
wait "$release"
[ "$(cat "$dir/release.rc")" = 0 ] || status=1
for step in package image; do
	eval pid=\$$step
	if wait "$pid"; then
		cat "$dir/$step"
	else
		echo "the $step's tests failed:"
		cat "$dir/$step"
		status=1
	fi
done
exit "$status"
