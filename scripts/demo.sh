#!/usr/bin/env bash
# The demo behind `make demo`: a SoftHSM development token, a signature over
# the trusted-authentication text for a sample user, checked by OpenSSL.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/signagent
demo=.demo
mkdir -p "$demo"
chmod 700 "$demo"

step() { printf '\n==> %s\n' "$*"; }

step "SoftHSM development token in $demo/hsm"
eval "$($bin --log-level warn dev-token --dir "$demo/hsm")"
$bin tokens

# A sample partner API key, kept in a 0600 file and never on a command line.
if [ ! -s "$demo/api-key" ]; then
  (umask 077; printf '0F6C2E5B-9D4A-4C1E-8A2B-7E3D1F0A9B8C\n' > "$demo/api-key")
fi
export SIGNAGENT_API_KEY_FILE="$demo/api-key"

step "Text signed for the sample user (phone +7 916 123-45-67), shown with CR LF visible"
$bin --log-level warn sign --phone "+7 916 123-45-67" --out "$demo/signature.der" --text-out "$demo/text"
sed -e 's/\r$/\\r/' -e 's/^apikey=\(....\).*\\r$/apikey=\1…(masked)\\r/' "$demo/text"

step "Detached CMS signature: $demo/signature.der ($(wc -c < "$demo/signature.der") bytes), made on the token"
$bin verify --signature "$demo/signature.der" --content "$demo/text"

step "OpenSSL checks the same signature"
openssl cms -verify -binary -inform DER -in "$demo/signature.der" -content "$demo/text" -noverify -out /dev/null

printf '\nDone. To use the token yourself:\n  eval "$(%s dev-token --dir %s)"\n' "$bin" "$demo/hsm"
