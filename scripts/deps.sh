#!/usr/bin/env bash
# Installs the Debian packages named as arguments when they are missing.
# Used by `make test` and `make demo`; runs apt-get only when something is
# missing, with sudo when not root.
#
# Then, whenever vsmartcard-vpcd is installed, it removes the reader entry
# that package gives the system's pcscd (/etc/reader.conf.d/vpcd): with it,
# the system's pcscd loads vpcd, which listens on every interface, and anyone
# on the network could plug a virtual card into the machine's pcscd. The card
# rig (pkcs11/pkcs11test/card.go) needs none of it: its pcscd reads a configuration of
# its own, in namespaces of its own. dpkg keeps a removed conffile removed
# through upgrades. $DEPS_ROOT (tests) stands for / there.
set -euo pipefail
sudo=""
as_root() {
  if [ "$(id -u)" -ne 0 ] && [ -z "${DEPS_ROOT:-}" ]; then
    command -v sudo >/dev/null || { echo "deps: need root or sudo to $*" >&2; exit 1; }
    sudo="sudo"
  fi
}

# disable_vpcd removes the system's vpcd reader entry and restarts the
# system's pcscd when it runs under systemd, so that vpcd stops listening.
disable_vpcd() {
  local conf="${DEPS_ROOT:-}/etc/reader.conf.d/vpcd"
  [ -e "$conf" ] || return 0
  as_root "remove $conf"
  echo "deps: removing $conf (vpcd would listen on every interface for the system's pcscd; the card rig has its own)" >&2
  $sudo rm -f "$conf"
  if [ -z "${DEPS_ROOT:-}" ] && [ -d /run/systemd/system ] && systemctl is-active --quiet pcscd.service 2>/dev/null; then
    $sudo systemctl restart pcscd.service >&2 || true
  fi
}

missing=()
for pkg in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  as_root "install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
disable_vpcd
