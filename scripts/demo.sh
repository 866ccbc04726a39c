#!/usr/bin/env bash
# The demo behind `make demo`: a SoftHSM development token and the local
# emulator of the service; link a sample user, sign on the token, and run the
# trusted-authentication flow to an auth.sid.
. "$(dirname "$0")/lib.sh"
bin=bin/signagent
emu=bin/signagent-emulator
demo=.demo
private_dir "$demo"

step() { printf '\n==> %s\n' "$*"; }

step "1. SoftHSM development token in $demo/hsm"
eval "$($bin token dev --dir "$demo/hsm")"
$bin token list

# A sample partner API key, kept in a 0600 file and never on a command line.
if [ ! -s "$demo/api-key" ]; then
  (umask 077; printf '0F6C2E5B-9D4A-4C1E-8A2B-7E3D1F0A9B8C\n' > "$demo/api-key")
fi
export SIGNAGENT_API_KEY_FILE="$demo/api-key"
if [ ! -s "$demo/developer-key" ]; then
  (umask 077; printf 'demoClient-%s\n' "$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" > "$demo/developer-key")
fi
export SIGNAGENT_DEVELOPER_KEY_FILE="$demo/developer-key"
# The OpenID Connect application's client secret and the sample user's
# password, random per demo directory, in 0600 files.
for f in client-secret user-password; do
  [ -s "$demo/$f" ] || (umask 077; od -An -N12 -tx1 /dev/urandom | tr -d ' \n' > "$demo/$f")
done
hash=$($emu --hash-password < "$demo/user-password")

step "2. Emulator of the service on loopback (partner trusts the token's certificate)"
{
  cat <<YAML
partners:
  - name: demo-partner
    apiKeyFile: api-key
    certificates: [hsm/cert.pem]
    canLinkByPhone: true
developers:
  - name: demo-integrator
    keyFile: developer-key
YAML
  sample_world "$hash" '    snils: "112-233-445 95"
    certificates: [hsm/cert.pem]
'
} > "$demo/emulator.yaml"
# A port of its own, free now, so that the lines at the end start it again
# on the same address (the one the demo's settings keep).
eport=18080
while (exec 3<>/dev/tcp/127.0.0.1/$eport) 2>/dev/null; do eport=$((eport + 1)); done
emubin=$emu
# start_emulator: the emulator from the demo's files, on $eport.
start_emulator() {
  rm -f "$demo/emulator.url"
  $emubin --log-level warn --listen "127.0.0.1:$eport" --config "$demo/emulator.yaml" --url-file "$demo/emulator.url" &
  emu=$!
  for _ in $(seq 300); do [ -s "$demo/emulator.url" ] && break; sleep 0.05; done
  [ -s "$demo/emulator.url" ] || { echo "the emulator did not start" >&2; exit 1; }
}
start_emulator
trap 'kill $emu 2>/dev/null; wait $emu 2>/dev/null || true' EXIT
export SIGNAGENT_TRUSTED_URL="$(cat "$demo/emulator.url")"
export SIGNAGENT_BUSINESS_URL="$SIGNAGENT_TRUSTED_URL"
echo "emulator at $SIGNAGENT_TRUSTED_URL"

step "3. Text signed for the sample user (CR LF shown as \\r, API key masked)"
$bin trusted sign --phone '+7 916 123-45-67' --out "$demo/signature.der" --text-out "$demo/text"
sed -e 's/\r$/\\r/' -e 's/^apikey=\(....\).*\\r$/apikey=\1…(masked)\\r/' "$demo/text"
openssl cms -verify -binary -inform DER -in "$demo/signature.der" -content "$demo/text" -noverify -out /dev/null

step "4. Link the user (PUT register-external-service-id)"
$bin trusted link --phone '+7 916 123-45-67' --service-user-id crm-user-42

step "5. authenticate-by-truster with a fresh signature, then approve-truster: the auth.sid"
sid=$($bin trusted session --phone '+7 916 123-45-67' --service-user-id crm-user-42)
# The auth.sid is a secret (whoever holds it acts as the user): shown masked.
echo "auth.sid: ${sid:0:4}…(masked, ${#sid} characters)"

step "6. The same with the SNILS, as JSON"
$bin trusted session --snils '112-233-445 95' --service-user-id crm-user-42 --json | sed -E 's/("sid": "....)[^"]*/\1…(masked)/'

step "7. The auth.sid exchanged for a legacy token (Authenticate V3 type=sid); the business header, masked"
(umask 077; printf '%s\n' "$sid" > "$demo/sid")
$bin header --scheme legacy --by sid --sid-file "$demo/sid" |
  sed -E 's/(ddauth_api_client_id=.{4})[^,]*/\1…(masked)/; s/(ddauth_token=.{4}).*/\1…(masked)/'

step "8. OpenID Connect device flow: login shows a code; the demo approves it on the emulator's /device page, as the user would"
export XDG_STATE_HOME="$PWD/$demo/state" SIGNAGENT_OIDC_URL="$SIGNAGENT_TRUSTED_URL" SIGNAGENT_CLIENT_ID=demo-app \
  SIGNAGENT_CLIENT_SECRET_FILE="$demo/client-secret" SIGNAGENT_SPACE=staging
# login_approved ARGS: signagent oidc login ARGS, approved on the emulator's
# /device page as ivanov@example.com.
login_approved() {
  $bin oidc login --no-qr "$@" > "$demo/login.out" 2>&1 &
  local login=$! code status
  for _ in $(seq 600); do grep -q 'enter the code' "$demo/login.out" && break; sleep 0.05; done
  code=$(sed -n 's/.*enter the code \([A-Z]*\)$/\1/p' "$demo/login.out")
  [ -n "$code" ] || { cat "$demo/login.out" >&2; echo "login printed no code" >&2; exit 1; }
  status=$(curl -sS -o /dev/null -w '%{http_code}' --data-urlencode "user_code=$code" --data-urlencode login=ivanov@example.com \
    --data-urlencode "password@$demo/user-password" --data-urlencode decision=allow "$SIGNAGENT_OIDC_URL/device")
  echo "POST /device as ivanov@example.com, code $code: HTTP $status"
  [ "$status" = 200 ] || { kill $login; echo "the approval failed" >&2; exit 1; }
  wait $login
  cat "$demo/login.out"
}
login_approved
tok=$($bin oidc token)
printf 'access token: %s…(masked, %d characters), expires %s\n' "${tok:0:4}" "${#tok}" \
  "$($bin oidc status --json | sed -n 's/.*"accessTokenExpiresAt": "\(.*\)".*/\1/p')"
printf 'GetMyOrganizations with it: HTTP %s\n' \
  "$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $tok" "$SIGNAGENT_BUSINESS_URL/GetMyOrganizations?autoRegister=false")"

step "9. signagent api for the OpenID Connect user: GetMyOrganizations"
$bin api GET "/GetMyOrganizations?autoRegister=false"

step "10. The agent as an authorizing proxy: GetMyOrganizations for the trusted user (auth.sid -> legacy token -> call)"
rm -f "$demo/agent.sock"
$bin --log-level warn serve --listen "unix:$PWD/$demo/agent.sock" --audit-log "$demo/audit.log" &
agent=$!
trap 'kill $agent $emu 2>/dev/null; wait $agent $emu 2>/dev/null || true' EXIT
for _ in $(seq 600); do curl -sf --unix-socket "$demo/agent.sock" -o /dev/null http://agent/readyz && break; sleep 0.05; done
trusted='Signagent-Identity: trusted phone=+79161234567 serviceUserId=crm-user-42'
echo "GET /v1/service/GetMyOrganizations with $trusted"
curl -sS --unix-socket "$demo/agent.sock" -H "$trusted" 'http://agent/v1/service/GetMyOrganizations?autoRegister=false'
echo
# The agent writes its audit line a moment after the answer (its writer
# does not hold the request up): wait for it.
for _ in $(seq 150); do grep -q '"operation":"service"' "$demo/audit.log" 2>/dev/null && break; sleep 0.1; done
echo "audit: $(grep '"operation":"service"' "$demo/audit.log" | tail -n 1)"

step "11. A box that is not the user's: 403 from the service, passed on as it came (and the same through signagent api, exit 3)"
curl -sS --unix-socket "$demo/agent.sock" -H "$trusted" -D - \
  'http://agent/v1/service/GetMyEmployee?boxId=7d1e2f30-4a5b-4c6d-8e9f-0a1b2c3d4e5f' | grep -Ev '^(Date|Content-Length):'
echo
set +e
$bin api 'GetMyEmployee?boxId=7d1e2f30-4a5b-4c6d-8e9f-0a1b2c3d4e5f'
echo "signagent api exit status: $?"
set -e
kill -TERM $agent
wait $agent

step "12. Several agents, one Redis: the profile signed in once into the shared store, served by two agents"
port=26379
while (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; do port=$((port + 1)); done
redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --dir "$PWD/$demo" --logfile "$PWD/$demo/redis.log" &
redis=$!
trap 'kill $redis $emu 2>/dev/null; wait $redis $emu 2>/dev/null || true' EXIT
rm -f "$demo/store.key"
$bin store-key --out "$demo/store.key"
export SIGNAGENT_STORE="redis://127.0.0.1:$port" SIGNAGENT_STORE_KEY_FILE="$demo/store.key"
for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
login_approved --profile shared
for a in a1 a2; do
  rm -f "$demo/$a.sock"
  $bin --log-level warn serve --listen "unix:$PWD/$demo/$a.sock" --audit-log /dev/null &
  eval "pid_$a=\$!"
done
trap 'kill $pid_a1 $pid_a2 $redis $emu 2>/dev/null; wait $pid_a1 $pid_a2 $redis $emu 2>/dev/null || true' EXIT
for a in a1 a2; do
  for _ in $(seq 600); do curl -sf --unix-socket "$demo/$a.sock" -o /dev/null http://agent/readyz && break; sleep 0.05; done
  printf 'agent %s: readyz %s; GetMyOrganizations for oidc profile=shared: HTTP %s\n' "$a" \
    "$(curl -sS --unix-socket "$demo/$a.sock" http://agent/readyz | sed 's/,"token":{[^}]*}//')" \
    "$(curl -sS -o /dev/null -w '%{http_code}' --unix-socket "$demo/$a.sock" -H 'Signagent-Identity: oidc profile=shared' \
      'http://agent/v1/service/GetMyOrganizations?autoRegister=false')"
done
echo "no token or profile name in Redis: the keys are HMACs and the values sealed (AES-256-GCM with $demo/store.key)"
kill -TERM $pid_a1 $pid_a2 $redis
wait $pid_a1 $pid_a2 $redis 2>/dev/null || true
unset SIGNAGENT_STORE SIGNAGENT_STORE_KEY_FILE

step "13. A context of the settings file for the demo (signagent setup): every answer from the variables set above"
rm -f "$demo/config.yaml"
(umask 077; : > "$demo/config.yaml")
$bin setup --config "$demo/config.yaml" --context demo --non-interactive
kill -TERM $emu
wait $emu 2>/dev/null || true

step "14. The emulator started again from the demo's files; the context alone, no other variable (env -i): link, session, header, api"
start_emulator
trap 'kill $emu 2>/dev/null; wait $emu 2>/dev/null || true' EXIT
# fresh CMD ARGS: CMD run from / with nothing in its environment but HOME,
# PATH and the demo's settings file.
root=$PWD
fresh() {
  local cmd=$1
  shift
  (cd / && env -i HOME="$HOME" PATH="$PATH" SIGNAGENT_CONFIG="$root/$demo/config.yaml" "$root/$cmd" "$@")
}
fresh $bin trusted link --phone '+7 916 123-45-67' --service-user-id crm-user-42
fresh $bin trusted session --phone '+7 916 123-45-67' --service-user-id crm-user-42 | sed -E 's/^(....).*/auth.sid: \1…(masked)/'
fresh $bin header --scheme legacy --by certificate | sed -E 's/(ddauth_api_client_id=.{4})[^,]*/\1…(masked)/; s/(ddauth_token=.{4}).*/\1…(masked)/'
fresh $bin api --scheme legacy --by certificate '/GetMyOrganizations?autoRegister=false'
echo
kill -TERM $emu
wait $emu 2>/dev/null || true
trap - EXIT

cat <<EOF

Done. The emulator has stopped; it remembers nothing, so the user is linked again.
To go on by hand with the demo's token, files and settings, from any directory:

  $PWD/$emubin --listen 127.0.0.1:$eport --config $PWD/$demo/emulator.yaml &
  export SIGNAGENT_CONFIG=$PWD/$demo/config.yaml   # the context "demo" that setup wrote
  export SIGNAGENT_TOKEN_STORE=$PWD/$demo/state     # OpenID Connect sign-ins stay in the demo's directory
  $PWD/$bin trusted link --phone '+7 916 123-45-67' --service-user-id crm-user-42
  $PWD/$bin trusted session --phone '+7 916 123-45-67' --service-user-id crm-user-42    # prints the auth.sid (a secret)
  $PWD/$bin header --scheme legacy --by certificate                           # the ServiceAuth header
  $PWD/$bin header --scheme legacy --by sid --phone '+7 916 123-45-67' --service-user-id crm-user-42
  $PWD/$bin api --scheme legacy --by certificate '/GetMyOrganizations?autoRegister=false'   # GET by default
  $PWD/$bin oidc login --no-qr &     # OpenID Connect: then approve the code it prints as the demo user:
  curl --data-urlencode user_code=CODE --data-urlencode login=ivanov@example.com \\
       --data-urlencode password@$PWD/$demo/user-password --data-urlencode decision=allow http://127.0.0.1:$eport/device
  $PWD/$bin api '/GetMyOrganizations?autoRegister=false'                       # --scheme oidc

The emulator's one URL, http://127.0.0.1:$eport, is its base, API and identity provider address
alike (docs/emulator.md); on a shared machine, where that port may be taken, give the emulator
--listen 127.0.0.1:0 --url-file FILE and the URL it writes. signagent setup writes such a context
into your own settings file.
EOF
