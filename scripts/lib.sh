# Sourced by the scripts (demo.sh, bench.sh, image-test.sh,
# package-install-test.sh) for what they all begin with: strict mode, the
# repository's root as the working directory, and the few helpers below.
# Source it as the script's first command:
#   . "$(dirname "$0")/lib.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
me=$(basename "$0" .sh)

# fail says what is wrong, named after the script, and exits 1.
fail() { echo "$me: $*" >&2; exit 1; }

# need fails unless every command named is installed.
need() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null || fail "$c is missing: make deps installs it (Makefile DEPS)"
	done
}

# private_dir makes the directory DIR, for the owner alone (mode 0700): it
# holds tokens, PINs and keys.
private_dir() {
	mkdir -p "$1"
	chmod 700 "$1"
}

# podman_conf points podman at a containers.conf of the script's own in
# DIR (nothing in /etc is changed): runc, and rlimits below the machine's
# hard limits, which podman here needs.
podman_conf() {
	cat > "$1/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=32768:32768"]
[engine]
runtime = "runc"
CONF
	export CONTAINERS_CONF=$1/containers.conf
}

# apt_sources names the machine's Debian sources for mmdebstrap: the
# deb822 file a Debian 12 image has, else sources.list, else Debian's
# own mirror (mmdebstrap takes a file or a URL).
apt_sources() {
	local f
	for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
		if [ -s "$f" ] && grep -qE '^[[:space:]]*(deb|URIs:)' "$f"; then
			echo "$f"
			return
		fi
	done
	echo http://deb.debian.org/debian
}

# sample_world HASH [USER_LINES]: the emulator's OpenID Connect client and
# its sample world (the user ivanov, whose password hash is HASH, and two
# organizations), as YAML for the emulator's configuration. USER_LINES are
# more of the user's fields, each "    key: value" and a newline. The demo
# and the image's test sign in as this user.
sample_world() {
	cat <<YAML
oidc:
  clients:
    - id: demo-app
      secretFile: client-secret
  deviceInterval: 1s
users:
  - id: ivanov
    phone: "+7 916 123-45-67"
    login: ivanov@example.com
    passwordHash: "$1"
${2-}    boxes: [3f2a0c1e-5b7d-4e8f-9a01-23456789abcd]
organizations:
  - id: org-horns
    fullName: Horns and Hooves LLC
    boxes: [{guid: 3f2a0c1e-5b7d-4e8f-9a01-23456789abcd, title: Main}]
  - id: org-else
    fullName: Someone Else JSC
    boxes: [{guid: 7d1e2f30-4a5b-4c6d-8e9f-0a1b2c3d4e5f, title: Theirs}]
YAML
}
