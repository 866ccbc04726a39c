#!/usr/bin/env bash
# Tests the container image (make test runs it): builds it (scripts/image.sh),
# then runs deploy/compose.yaml with podman: Redis, the emulator as the
# service, an OpenID Connect profile signed in once into Redis by the login
# service (the device flow, approved on the emulator's /device page), and
# three agents from the image serving it; one agent killed, the other two
# still serving; Redis stopped (the agents degraded, still ready) and started again
# (served again). And the image alone: its configuration, its user, a store
# without its key refused in one line with exit 2. Each failure says what
# is wrong and exits 1.
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
		docker-compose -p $project -f deploy/compose.yaml --profile emulator --profile login down -v -t 5 >/dev/null 2>&1
		kill "$service" 2>/dev/null
		wait "$service" 2>/dev/null
	fi
	podman rmi -f localhost/signagent-emulator:$project localhost/signagent-redis:$project >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
podman_conf "$tmp"

# The image, as make image builds it, for this machine's architecture
# alone (scripts/release-test.sh builds and checks both).
out=$(IMAGE_ARCHES=$(dpkg --print-architecture) scripts/image.sh) || fail "make image failed"
image=$(echo "$out" | sed -n 1p)
archive=$(echo "$out" | sed -n 2p)
built=$(date +%s)

# Its configuration, read back from the OCI archive.
cfg=$(skopeo inspect --config "oci-archive:$archive")
for want in '"User": "65532:65532"' '"/usr/bin/signagent",' '"serve"' '"org.opencontainers.image.version": "' \
	'"org.opencontainers.image.revision": "' '"org.opencontainers.image.source": "' '"org.opencontainers.image.licenses": "Apache-2.0"'; do
	grep -qF "$want" <<<"$cfg" || fail "$archive: its configuration lacks $want: $cfg"
done
# Debian's format keeps the health check (the OCI format has no field for it).
hc=$(podman image inspect --format '{{json .HealthCheck}}' "$image")
if grep -q -- --probe <<<"$(build/image/$(dpkg --print-architecture)/ctx/signagent agent status --help)"; then
	grep -q '"agent","status","--probe","ready"' <<<"$hc" || fail "$image: health check $hc, want agent status --probe ready"
fi
[ "$(podman run --rm --network none --no-healthcheck --entrypoint /usr/bin/signagent "$image" --version | cut -d' ' -f1)" = signagent ] || fail "the image does not run signagent"

# A shared store without its key: one line, exit 2, before anything starts.
set +e
err=$(podman run --rm --network none --no-healthcheck -e SIGNAGENT_STORE=redis://127.0.0.1:1 -e SIGNAGENT_API_URL=http://127.0.0.1:1 \
	-e SIGNAGENT_AUTH_URL=http://127.0.0.1:1 -e SIGNAGENT_CLIENT_ID=x -e SIGNAGENT_CLIENT_SECRET=y "$image" 2>&1 >/dev/null)
rc=$?
set -e
[ $rc = 2 ] || fail "an agent with a shared store and no key: exit $rc, want 2 ($err)"
[ "$(printf '%s\n' "$err" | grep -c '^signagent: ')" = 1 ] || fail "an agent with a shared store and no key: not one error line: $err"
grep -q 'store-key-file' <<<"$err" || fail "an agent with a shared store and no key does not name --store-key-file: $err"

# The test's own images: the emulator on the same root (not in the shipped
# image), and Redis from Debian's redis-server with the libraries it links
# (the host's: good for a test, not for shipping).
go build -o "$tmp/signagent-emulator" ./cmd/signagent-emulator
c=$(buildah from --quiet "$image")
buildah copy --quiet "$c" "$tmp/signagent-emulator" /usr/bin/signagent-emulator >/dev/null
buildah config --healthcheck '' "$c" # the agent's, not the emulator's
buildah commit --quiet --rm "$c" localhost/signagent-emulator:$project >/dev/null
rr=$tmp/redis-root
mkdir -p "$rr/usr/bin" "$rr/data" "$rr/tmp"
cp /usr/bin/redis-server "$rr/usr/bin/"
for lib in $(ldd /usr/bin/redis-server | awk '/=> \//{print $3} /^\t\//{print $1}'); do
	mkdir -p "$rr$(dirname "$lib")" && cp -L "$lib" "$rr$lib"
done
mkdir -p "$rr/lib64" && cp -L /lib64/ld-linux-*.so.* "$rr/lib64/" 2>/dev/null || true
c=$(buildah from --quiet scratch)
buildah copy --quiet "$c" "$rr" / >/dev/null
buildah config --entrypoint '[]' --cmd '["redis-server"]' "$c"
buildah commit --quiet --rm "$c" localhost/signagent-redis:$project >/dev/null

# Secrets and the emulator's configuration, the agent's user's and 0600.
sec=$tmp/secrets
mkdir -p "$sec/emulator" "$tmp/run/agent1" "$tmp/run/agent2" "$tmp/run/agent3"
for f in client-secret user-password; do od -An -N12 -tx1 /dev/urandom | tr -d ' \n' > "$sec/$f"; done
hash=$("$tmp/signagent-emulator" --hash-password < "$sec/user-password")
cp "$sec/client-secret" "$sec/emulator/client-secret"
sample_world "$hash" > "$sec/emulator/emulator.yaml"
# The store's password as deploy/compose.yaml's head comment makes it:
# the agents' file, and Redis's ACL file with its SHA-256 only.
od -An -N24 -tx1 /dev/urandom | tr -d ' \n' > "$sec/store-password"
mkdir -p "$sec/redis"
printf 'user default on #%s ~* &* +@all\n' "$(sha256sum < "$sec/store-password" | cut -d' ' -f1)" > "$sec/redis/users.acl"
chown -R 65532:65532 "$sec" "$tmp/run"
chmod 0700 "$sec" "$sec/emulator" "$tmp/run"/*
err=$(podman run --rm --network none --no-healthcheck -v "$sec:/s" --entrypoint /usr/bin/signagent "$image" store-key --out /s/store-key 2>&1) ||
	fail "signagent store-key in the image: $err"
chmod 0600 "$sec"/* "$sec/emulator"/* 2>/dev/null || true
chmod 0700 "$sec/emulator"
[ -s "$sec/store-key" ] || fail "signagent store-key in the image wrote no key"

# Free loopback ports for Redis and the emulator.
free_port() {
	local p=$1
	while (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; do p=$((p + 1)); done
	echo $p
}
export REDIS_PORT=$(free_port 26400) EMULATOR_PORT=$(free_port 18400)
export SIGNAGENT_IMAGE=$image SIGNAGENT_EMULATOR_IMAGE=localhost/signagent-emulator:$project \
	REDIS_IMAGE=localhost/signagent-redis:$project SIGNAGENT_SECRETS=$sec SIGNAGENT_RUN=$tmp/run \
	SIGNAGENT_API_URL=http://127.0.0.1:$EMULATOR_PORT SIGNAGENT_AUTH_URL=http://127.0.0.1:$EMULATOR_PORT
emu=http://127.0.0.1:$EMULATOR_PORT

# podman's Docker API on a socket of the test's own, for docker-compose.
podman system service --time=0 "unix://$tmp/podman.sock" 2>"$tmp/podman-service.log" &
service=$!
export DOCKER_HOST=unix://$tmp/podman.sock
for _ in $(seq 600); do curl -sf --unix-socket "$tmp/podman.sock" -o /dev/null http://d/_ping && break; sleep 0.1; done
compose() { docker-compose -p $project -f deploy/compose.yaml "$@"; }

compose --profile emulator up -d redis emulator 2>"$tmp/compose.err" || fail "compose up redis emulator: $(cat "$tmp/compose.err")"
for _ in $(seq 600); do curl -s -o /dev/null "$emu/_emulator/stats" && break; sleep 0.1; done
for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping 2>&1 | grep -q NOAUTH && break; sleep 0.1; done
redis-cli -p "$REDIS_PORT" ping 2>&1 | grep -q NOAUTH || fail "Redis answers without the password: $(redis-cli -p "$REDIS_PORT" ping 2>&1)"
curl -sf -o /dev/null "$emu/_emulator/stats" || fail "the emulator did not start: $(podman logs ${project}_emulator_1 2>&1 | tail -3)"

# The profile signed in once, into Redis: login shows a code in its log,
# the test approves it on /device as the user would.
compose --profile login up -d login 2>"$tmp/compose.err" || fail "compose up login: $(cat "$tmp/compose.err")"
code=
for _ in $(seq 600); do
	code=$(podman logs ${project}_login_1 2>&1 | sed -n 's/.*enter the code \([A-Z]*\)$/\1/p')
	[ -n "$code" ] && break
	sleep 0.1
done
[ -n "$code" ] || fail "login printed no code: $(podman logs ${project}_login_1 2>&1)"
status=$(curl -sS -o /dev/null -w '%{http_code}' --data-urlencode "user_code=$code" --data-urlencode login=ivanov@example.com \
	--data-urlencode "password@$sec/user-password" --data-urlencode decision=allow "$emu/device")
[ "$status" = 200 ] || fail "approving the code on /device: HTTP $status"
rc=$(podman wait ${project}_login_1)
[ "$rc" = 0 ] || fail "login exited $rc: $(podman logs ${project}_login_1 2>&1)"

compose up -d agent1 agent2 agent3 2>"$tmp/compose.err" || fail "compose up agents: $(cat "$tmp/compose.err")"
call() { # call AGENT: the status of GetMyOrganizations for the profile through AGENT
	curl -sS -o /dev/null -w '%{http_code}' --unix-socket "$tmp/run/$1/agent.sock" -H 'Signagent-Identity: oidc profile=shared' \
		'http://agent/v1/service/GetMyOrganizations?autoRegister=false' 2>/dev/null || true
}
ready() { curl -sS -o /dev/null -w '%{http_code}' --unix-socket "$tmp/run/$1/agent.sock" http://agent/readyz 2>/dev/null || true; }
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
readyz() { curl -sS --unix-socket "$tmp/run/$1/agent.sock" http://agent/readyz 2>/dev/null || true; }
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
	[ -e "$tmp/run/$a/agent.sock" ] && fail "$a left its socket behind on stop"
done
end=$(date +%s)
size=$(podman image inspect --format '{{.Size}}' "$image")
echo "image-test: $image ($((size / 1000000)) MB, $archive $(($(stat -c %s "$archive") / 1000000)) MB): built in $((built - start)) s; compose test passed in $((end - built)) s"
