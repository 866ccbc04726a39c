#!/usr/bin/env bash
# `make bench`: a fresh SoftHSM token with an RSA-2048 and a P-256 key, and
# a GOST test token with a GOST R 34.10-2012 256-bit key, then
# `signagent-bench` on it (raw token, CMS, the agent over its socket, the
# emulator's sessions, openssl and pkcs11-tool for comparison). Extra
# arguments go to signagent-bench, e.g. `make bench BENCH_ARGS="--token-delay 200ms"`.
. "$(dirname "$0")/lib.sh"
bin=bin/signagent
bench=bin/signagent-bench
dir=.bench
private_dir "$dir"
# The GOST key's rows run on the GOST test module (software, built by
# dev-token with gcc against GnuTLS), beside the SoftHSM token.
gost="$(cd "$dir" && pwd)/gost"
$bin --log-level warn token dev --key-type gost2012-256 --dir "$gost" --force >/dev/null
eval "$($bin --log-level warn token dev --dir "$dir/hsm" --ec --force)"
$bench --log-level warn --ec-key-label signagent-dev-ec \
  --gost-key "pkcs11:token=signagent-dev;object=signagent-dev?module-path=$gost/libgosttoken.so&pin-source=file:$gost/pin" \
  "$@" | tee "$dir/result.txt"
echo "(also in $dir/result.txt)"
