#!/usr/bin/env bash
# Tests the container image (make test runs it): builds it (scripts/image.sh),
# then runs deploy/compose.yaml with podman: Redis, the emulator as the
# service, an OpenID Connect profile signed in once into Redis by the login
# service (the device flow, approved on the emulator's /device page), and
# three agents from the image serving it; one agent killed, the other two
# still serving; Redis stopped (the agents degraded, still ready) and started again
# (served again). And the image alone: its configuration, its user, a store
# without its key refused in one line with exit 2. Each failure says what
# is wrong and exits 1. With IMAGE_TEST_FROM_RELEASE set it builds nothing
# and tests the image make release-snapshot left (make test runs the
# release's test first).
#
# Debian's podman 4.3 runs the file through Debian's docker-compose and
# podman's Docker API socket: podman-compose 1.0.3 (Debian's) puts every
# container on a bridge network of its own and cannot do host networking,
# and the emulator serves on loopback only. podman here needs runc and
# rlimits below the machine's hard limits: a containers.conf of the test's
# own, through CONTAINERS_CONF (nothing in /etc is changed).
. "$(dirname "$0")/lib.sh"
need podman buildah docker-compose curl redis-server
start=$(date +%s)

tmp=$(mktemp -d /tmp/signagent-image-test.XXXXXX)
chmod 0755 "$tmp"
project=satest$$
service=
cleanup() {
	set +e
	if [ -n "$service" ]; then
		docker-compose -p $project -f deploy/compose.yaml --profile emulator --profile login --profile setup down -v -t 5 >/dev/null 2>&1
		docker-compose -p ${project}r -f deploy/compose.yaml down -v -t 1 >/dev/null 2>&1
		kill "$service" 2>/dev/null
		wait "$service" 2>/dev/null
	fi
	podman rmi -f localhost/signagent-redis:$project >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
podman_conf "$tmp"

host=$(dpkg --print-architecture)
if [ -n "${IMAGE_TEST_FROM_RELEASE:-}" ]; then
	# The image make release-snapshot left (make test runs the release's
	# test first): this machine's architecture's, the one that ships, in
	# podman's storage and in dist/, with the emulator's image beside it.
	version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
	version=${version#v}
	image=localhost/signagent:$version
	archive=dist/signagent_${version}_$host.oci.tar
	emulator_image=localhost/signagent-emulator:$version
	binary=build/image/$host/ctx/signagent
	for f in "$archive" "$binary"; do
		[ -s "$f" ] || fail "$f is missing: IMAGE_TEST_FROM_RELEASE takes what make release-snapshot leaves"
	done
	for i in "$image" "$emulator_image"; do
		podman image exists "$i" || fail "podman has no $i: IMAGE_TEST_FROM_RELEASE takes what make release-snapshot leaves"
	done
	made="taken from the release"
else
	# The image, as make image builds it, for this machine's architecture
	# alone (scripts/release-test.sh builds and checks both), in the test's
	# own directory (BUILD_DIR, DIST_DIR: build/ and dist/ are left as
	# they were).
	out=$(IMAGE_ARCHES=$host BUILD_DIR=$tmp/build DIST_DIR=$tmp/dist scripts/image.sh) || fail "make image failed"
	image=$(echo "$out" | sed -n 1p)
	archive=$(echo "$out" | sed -n 2p)
	emulator_image=$(echo "$out" | tail -n 1)
	[ -n "$emulator_image" ] && podman image exists "$emulator_image" || fail "make image built no emulator image: $out"
	binary=$tmp/build/image/$host/ctx/signagent
	made="built in $(($(date +%s) - start)) s"
fi
built=$(date +%s)

# Its configuration, read back from the OCI archive.
cfg=$(skopeo inspect --config "oci-archive:$archive")
for want in '"User": "65532:65532"' '"/usr/bin/signagent",' '"serve"' '"org.opencontainers.image.version": "' \
	'"org.opencontainers.image.revision": "' '"org.opencontainers.image.source": "' '"org.opencontainers.image.licenses": "Apache-2.0"'; do
	grep -qF "$want" <<<"$cfg" || fail "$archive: its configuration lacks $want: $cfg"
done
# Debian's format keeps the health check (the OCI format has no field for it).
hc=$(podman image inspect --format '{{json .HealthCheck}}' "$image")
if grep -q -- --probe <<<"$("$binary" agent status --help)"; then
	grep -q '"agent","status","--probe","ready"' <<<"$hc" || fail "$image: health check $hc, want agent status --probe ready"
fi
[ "$(podman run --rm --network none --no-healthcheck --entrypoint /usr/bin/signagent "$image" --version | cut -d' ' -f1)" = signagent ] || fail "the image does not run signagent"

# A shared store without its key: one line, exit 2, before anything starts.
set +e
err=$(podman run --rm --network none --no-healthcheck -e SIGNAGENT_STORE=redis://127.0.0.1:1 -e SIGNAGENT_BUSINESS_URL=http://127.0.0.1:1 \
	-e SIGNAGENT_OIDC_URL=http://127.0.0.1:1 -e SIGNAGENT_CLIENT_ID=x -e SIGNAGENT_CLIENT_SECRET=y "$image" 2>&1 >/dev/null)
rc=$?
set -e
[ $rc = 2 ] || fail "an agent with a shared store and no key: exit $rc, want 2 ($err)"
[ "$(printf '%s\n' "$err" | grep -c '^signagent: ')" = 1 ] || fail "an agent with a shared store and no key: not one error line: $err"
grep -q 'store-key-file' <<<"$err" || fail "an agent with a shared store and no key does not name --store-key-file: $err"

# The test's own Redis image, from Debian's redis-server and redis-cli
# with the libraries they link (the host's: good for a test, not for
# shipping), and the shell, cat and grep of the health check
# (docker.io/library/redis has them; no registry here).
rr=$tmp/redis-root
mkdir -p "$rr/usr/bin" "$rr/bin" "$rr/data" "$rr/tmp"
for b in /usr/bin/redis-server /usr/bin/redis-cli /bin/sh /bin/cat /bin/grep; do
	cp -L "$b" "$rr$b"
	for lib in $(ldd "$b" | awk '/=> \//{print $3} /^\t\//{print $1}'); do
		mkdir -p "$rr$(dirname "$lib")" && cp -L "$lib" "$rr$lib"
	done
done
mkdir -p "$rr/lib64" && cp -L /lib64/ld-linux-*.so.* "$rr/lib64/" 2>/dev/null || true
c=$(buildah from --quiet scratch)
buildah copy --quiet "$c" "$rr" / >/dev/null
buildah config --entrypoint '[]' --cmd '["redis-server"]' "$c"
buildah commit --quiet --rm "$c" localhost/signagent-redis:$project >/dev/null

# Free loopback ports for Redis, the emulator and agent1's listeners.
free_port() {
	local p=$1
	while (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; do p=$((p + 1)); done
	echo $p
}
export REDIS_PORT=$(free_port 26400) EMULATOR_PORT=$(free_port 18400)
export AGENT1_PORT=$(free_port $((EMULATOR_PORT + 1))) AGENT1_METRICS_PORT=$(free_port $((EMULATOR_PORT + 2)))
export REDIS_IMAGE=localhost/signagent-redis:$project \
	SIGNAGENT_BUSINESS_URL=http://127.0.0.1:$EMULATOR_PORT SIGNAGENT_OIDC_URL=http://127.0.0.1:$EMULATOR_PORT
emu=http://127.0.0.1:$EMULATOR_PORT

# podman's Docker API on a socket of the test's own, for docker-compose.
podman system service --time=0 "unix://$tmp/podman.sock" 2>"$tmp/podman-service.log" &
service=$!
export DOCKER_HOST=unix://$tmp/podman.sock COMPOSE_PROJECT_NAME=$project
for _ in $(seq 600); do curl -sf --unix-socket "$tmp/podman.sock" -o /dev/null http://d/_ping && break; sleep 0.1; done
compose() { docker-compose -p $project -f deploy/compose.yaml "$@"; }

# deploy/compose.yaml's head comment, followed as it is written, in a fresh
# directory: its commands (the lines "#   ", a continuation "#     ")
# run in order by one shell, with only these differences, each what the
# machine needs and not the file:
# - the two directories the comment names (/etc/signagent-compose,
#   /run/signagent-compose) are the fresh directory's: other runs of this
#   test share the machine; the ports and REDIS_IMAGE come from the
#   environment above, as the comment's variables allow;
# - make image was run a moment ago (scripts/image.sh, what it runs);
# - "docker compose" is Debian's docker-compose against podman's socket;
# - podman runs no health check by itself without systemd (it has no
#   timers here): a loop asks Redis's every second, as Docker's engine
#   and a podman under systemd do on their own;
# - the person reading the login's code from its output and approving it
#   on the emulator's /device page is curl.
fresh=$tmp/fresh
mkdir -p "$fresh"
# (The test's own compose calls and its cleanup name the same files; the
# comment's commands run without these.)
export SIGNAGENT_IMAGE=$image SIGNAGENT_EMULATOR_IMAGE=$emulator_image SIGNAGENT_SECRETS=$fresh/secrets SIGNAGENT_RUN=$fresh/run
steps=$fresh/steps.sh
sed -n '/^[^#]/q; s/^#   //p' deploy/compose.yaml |
	sed -e "s|/etc/signagent-compose|$fresh/secrets|g" -e "s|/run/signagent-compose|$fresh/run|g" > "$steps.body"
grep -q '^make image$' "$steps.body" && grep -q 'run --rm -T login' "$steps.body" ||
	fail "deploy/compose.yaml's head comment lost its commands: $(cat "$steps.body")"
{
	echo 'set -eo pipefail'
	echo 'make() { [ "$*" = image ] || command make "$@"; }'
	echo 'docker() { if [ "$1" = compose ]; then shift; docker-compose "$@"; else command docker "$@"; fi; }'
	cat "$steps.body"
} > "$steps"
( while sleep 1; do podman healthcheck run ${project}_redis_1 >/dev/null 2>&1 || true; done ) &
healthloop=$!
approve() { # the person at the emulator's /device page
	local code=
	for _ in $(seq 1200); do
		code=$(sed -n 's/.*enter the code \([A-Z]*\)$/\1/p' "$fresh/steps.log" | head -n1)
		[ -n "$code" ] && break
		sleep 0.1
	done
	[ -n "$code" ] || return 1
	curl -sS -o /dev/null -w '%{http_code}' --data-urlencode "user_code=$code" --data-urlencode login=ivanov@example.com \
		--data-urlencode "password@$fresh/secrets/user-password" --data-urlencode decision=allow "$emu/device" > "$fresh/approved"
}
: > "$fresh/steps.log"
approve &
approver=$!
literal0=$(date +%s.%N)
rc=0
timeout 600 env -u SIGNAGENT_SECRETS -u SIGNAGENT_RUN -u SIGNAGENT_IMAGE -u SIGNAGENT_EMULATOR_IMAGE bash "$steps" > "$fresh/steps.log" 2>&1 || rc=$?
literal1=$(date +%s.%N)
kill $healthloop $approver 2>/dev/null || true
wait $healthloop $approver 2>/dev/null || true
[ $rc = 0 ] || fail "deploy/compose.yaml's head comment, followed as written: exit $rc: $(tail -n 15 "$fresh/steps.log")"
[ "$(cat "$fresh/approved" 2>/dev/null)" = 200 ] || fail "approving the login's code on /device: HTTP $(cat "$fresh/approved" 2>/dev/null)"
n=$(grep -c 'Horns and Hooves' "$fresh/steps.log" || true)
[ "$n" = 2 ] || fail "the head comment's calls (Unix socket, then TCP with TLS and the bearer token): $n answered the organizations, want 2: $(tail -n 5 "$fresh/steps.log")"
grep -q '^signagent_build_info{' "$fresh/steps.log" || fail "the head comment's scrape of agent1's metrics listener: $(tail -n 3 "$fresh/steps.log")"
literal=$(printf '%.1f' "$(echo "$literal1 - $literal0" | bc)")
sec=$fresh/secrets
run=$fresh/run
redis-cli -p "$REDIS_PORT" ping 2>&1 | grep -q NOAUTH || fail "Redis answers without the password: $(redis-cli -p "$REDIS_PORT" ping 2>&1)"
podman healthcheck run ${project}_redis_1 >/dev/null || fail "Redis's health check fails on a Redis that serves"
ps -eo args | grep -F -f "$sec/store-password" && fail "the store's password is in a command line"
# Without the password the health check fails (it is not a ping that
# passes whatever Redis answers).
[ "$(podman exec ${project}_redis_1 sh -c "redis-cli -p $REDIS_PORT ping | grep -q PONG" >/dev/null 2>&1; echo $?)" != 0 ] ||
	fail "redis-cli ping without the password passes the health check's test"
# The metrics listener takes no bearer token and serves nothing else.
status=$(curl -sS -o /dev/null -w '%{http_code}' --cacert "$sec/tls.crt" "https://localhost:$AGENT1_METRICS_PORT/v1/service/GetMyOrganizations")
[ "$status" = 404 ] || fail "agent1's metrics listener answered $status for /v1/service, want 404"
# TCP without the bearer token: refused.
status=$(curl -sS -o /dev/null -w '%{http_code}' --cacert "$sec/tls.crt" -H 'Signagent-Identity: oidc profile=shared' \
	"https://localhost:$AGENT1_PORT/v1/service/GetMyOrganizations?autoRegister=false")
[ "$status" = 401 ] || fail "agent1's TCP listener without the bearer token: HTTP $status, want 401"

# A run directory root owns (the engine makes a missing one so): the
# agent stops with one line naming the directory and the chown, exit 2,
# as the operator sees it in the container's log. (A project of its own:
# docker-compose's run links an agent to Redis, which podman refuses.)
mkdir -p "$tmp/rootrun/agent2"
chmod 0755 "$tmp/rootrun/agent2"
SIGNAGENT_RUN=$tmp/rootrun docker-compose -p ${project}r -f deploy/compose.yaml up -d --no-deps agent2 2>"$tmp/compose.err" ||
	fail "compose up of an agent on a root-owned run directory: $(cat "$tmp/compose.err")"
rootrun=
errline='^signagent: |"level":"error"'
for _ in $(seq 300); do
	rootrun=$(podman logs ${project}r_agent2_1 2>&1 || true)
	grep -qE "$errline" <<<"$rootrun" && break
	sleep 0.1
done
SIGNAGENT_RUN=$tmp/rootrun docker-compose -p ${project}r -f deploy/compose.yaml down -v -t 1 >/dev/null 2>&1 || true
# The file logs JSON: the error is one line at level error with the exit
# status (restart: on-failure repeats it, the same line each time).
line=$(grep -m1 -E "$errline" <<<"$rootrun" || true)
grep -q '"exit":2' <<<"$line" && grep -qF 'give /run/signagent to uid 65532 (chown 65532 /run/signagent)' <<<"$line" ||
	fail "an agent on a root-owned run directory: want exit 2 and a line naming the directory and the chown: $rootrun"
[ "$(grep -E "$errline" <<<"$rootrun" | sed 's/"time":"[^"]*",//' | sort -u | grep -c .)" = 1 ] ||
	fail "an agent on a root-owned run directory: more than its one error line: $rootrun"
[ -e "$tmp/rootrun/agent2/agent.sock" ] && fail "an agent on a root-owned run directory made its socket"

call() { # call AGENT: the status of GetMyOrganizations for the profile through AGENT
	curl -sS -o /dev/null -w '%{http_code}' --unix-socket "$run/$1/agent.sock" -H 'Signagent-Identity: oidc profile=shared' \
		'http://agent/v1/service/GetMyOrganizations?autoRegister=false' 2>/dev/null || true
}
ready() { curl -sS -o /dev/null -w '%{http_code}' --unix-socket "$run/$1/agent.sock" http://agent/readyz 2>/dev/null || true; }
wait_ready() { # wait_ready AGENT WANT
	for _ in $(seq 600); do [ "$(ready "$1")" = "$2" ] && return; sleep 0.1; done
	fail "$1: /readyz $(ready "$1"), want $2: $(podman logs --tail 3 ${project}_$1_1 2>&1)"
}
for a in agent1 agent2 agent3; do
	wait_ready $a 200
	[ "$(call $a)" = 200 ] || fail "$a: GetMyOrganizations for the shared profile: HTTP $(call $a), want 200"
	[ "$(podman top ${project}_${a}_1 user | tail -n1)" = signagent ] || fail "$a does not run as signagent"
done
tokens=$(curl -sS "$emu/_emulator/stats" | sed -n 's/.*"accessTokens":\([0-9]*\).*/\1/p')
[ "$tokens" = 1 ] || fail "the emulator issued $tokens access tokens, want 1 (one sign-in served by three agents)"
# The container's own health check, where the image has one.
if [ "$hc" != null ] && [ -n "$hc" ] && grep -q probe <<<"$hc"; then
	podman healthcheck run ${project}_agent1_1 >/dev/null || fail "agent1: the health check fails on a ready agent"
fi

# A body past 256 KiB is held in a temporary file: the agents' read-only
# root needs a tmpfs on /tmp (docker gives none; podman's --read-only adds
# one of its own, so a big body cannot tell here): the file declares it.
n=$(compose config 2>/dev/null | grep -c -- '- /tmp$' || true)
[ "$n" -ge 4 ] || fail "deploy/compose.yaml gives $n of the agents and login a tmpfs on /tmp, want 4"

# One agent killed: the other two serve.
podman kill ${project}_agent2_1 >/dev/null
[ "$(call agent2)" != 200 ] || fail "agent2 answers after it was killed"
for a in agent1 agent3; do
	[ "$(call $a)" = 200 ] || fail "$a: HTTP $(call $a) with agent2 killed, want 200"
done

# Redis down: the store is shared, so the agents stay ready (200,
# "degraded", the store's check failing: they stay in the Service and
# serve what they hold); back (its append-only file kept the profile):
# ready and served again.
compose stop -t 5 redis 2>/dev/null
readyz() { curl -sS --unix-socket "$run/$1/agent.sock" http://agent/readyz 2>/dev/null || true; }
for a in agent1 agent3; do
	for _ in $(seq 600); do readyz $a | grep -q '"store":{"ready":false' && break; sleep 0.1; done
	body=$(readyz $a)
	grep -q '"status":"degraded"' <<<"$body" && grep -q '"store":{"ready":false' <<<"$body" && [ "$(ready $a)" = 200 ] ||
		fail "$a with Redis down: /readyz $(ready $a) $body, want 200 degraded naming the store"
done
compose start redis 2>/dev/null
for a in agent1 agent3; do
	wait_ready $a 200
	[ "$(call $a)" = 200 ] || fail "$a: HTTP $(call $a) with Redis back, want 200"
done
tokens=$(curl -sS "$emu/_emulator/stats" | sed -n 's/.*"accessTokens":\([0-9]*\).*/\1/p')
[ "$tokens" = 1 ] || fail "the emulator issued $tokens access tokens by the end, want 1"

compose --profile emulator --profile login down -v -t 10 2>/dev/null
for a in agent1 agent3; do
	[ -e "$run/$a/agent.sock" ] && fail "$a left its socket behind on stop"
done
end=$(date +%s)
size=$(podman image inspect --format '{{.Size}}' "$image")
echo "image-test: $image ($((size / 1000000)) MB, $archive $(($(stat -c %s "$archive") / 1000000)) MB): $made; deploy/compose.yaml's head comment followed as written in $literal s; compose test passed in $((end - built)) s"
echo "image-test: an agent on a root-owned run directory says: $line"
