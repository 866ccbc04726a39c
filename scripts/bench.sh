#!/usr/bin/env bash
# `make bench`: a fresh SoftHSM token with an RSA-2048 and a P-256 key, then
# `signagent bench` on it (raw token, CMS, the agent over its socket, the
# emulator's sessions, openssl and pkcs11-tool for comparison). Extra
# arguments go to signagent bench, e.g. `make bench BENCH_ARGS="--token-delay 200ms"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/signagent
dir=.bench
mkdir -p "$dir"
chmod 700 "$dir"
eval "$($bin --log-level warn dev-token --dir "$dir/hsm" --ec --force)"
$bin --log-level warn bench --ec-key-label signagent-dev-ec "$@" | tee "$dir/result.txt"
echo "(also in $dir/result.txt)"
