#!/usr/bin/env bash
# Tests the Debian package's life under systemd (make test runs it, after
# scripts/package-test.sh): in a Debian 12 container booted with systemd as
# its init (podman --systemd=always), the package is installed, an agent for
# OpenID Connect alone is configured (a client secret, no PIN and no API-key
# file) and started by its socket as an administrator starts it, the package
# is upgraded to a newer build, removed and purged. Real dpkg, systemd,
# deb-systemd-helper and deb-systemd-invoke: nothing is recorded in their
# place. It checks:
#
#   - a first install enables and starts nothing, and makes the user and
#     /etc/signagent;
#   - the unit starts without PIN and API-key files and hands the agent only
#     the credentials that hold something (the agent's environment is read
#     back: the client secret, then a PIN file added, never an empty file);
#   - the upgrade restarts the running agent (a new PID, the new version
#     answering /metrics) and keeps agent.yaml, an edited conffile and the
#     socket's enabled state;
#   - remove stops the socket and the agent (its process is gone) and keeps
#     the configuration; purge removes it (/etc/signagent, the conffile, the
#     enablement links) and keeps /var/lib/signagent, the audit log.
#
# The container's root is Debian 12's essential packages, systemd and curl,
# made once by mmdebstrap from the machine's apt sources (about 90 s) and
# kept in build/pkgtest (delete it to make it again); the container may
# ptrace (SYS_PTRACE), for root to read the agent's environment.
# `scripts/package-install-test.sh --prepare` only makes that root (make
# test makes it beside the Go tests, which leave a core idle while they
# wait). The packages are built in the test's own directory (BUILD_DIR,
# DIST_DIR: scripts/package.sh), dist/ left as it was; PACKAGE_TEST_DEB
# names the package to install instead of building it (make test: the
# release's), and only the newer one is built. podman here needs runc
# and rlimits below the machine's hard limits: a containers.conf of the
# test's own, through CONTAINERS_CONF (docs/deploy.md). Each failure says
# what is wrong and exits 1.
. "$(dirname "$0")/lib.sh"
need podman mmdebstrap dpkg-deb
start=$(date +%s)

# prepare_root: the container's root, build/pkgtest/debian12-systemd.tar,
# unless it is there (written aside, then renamed: whole or absent).
root=build/pkgtest/debian12-systemd.tar
prepare_root() {
	[ -s "$root" ] && return 0
	mkdir -p build/pkgtest
	local log
	log=$(mktemp)
	mmdebstrap --quiet --mode=root --format=tar --variant=essential --include=systemd,curl \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		bookworm "$root.new.$$" "$(apt_sources)" >"$log" 2>&1 ||
		{ rm -f "$root.new.$$"; fail "mmdebstrap failed: $(tail -n 5 "$log"; rm -f "$log")"; }
	rm -f "$log"
	mv "$root.new.$$" "$root"
}
if [ "${1:-}" = --prepare ]; then
	prepare_root
	exit 0
fi

tmp=$(mktemp -d /tmp/signagent-package-test.XXXXXX)
name=sapkgtest$$
image=localhost/signagent-pkgtest:$$
cleanup() {
	set +e
	podman rm -f -t 0 $name >/dev/null 2>&1
	podman rmi -f $image >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
podman_conf "$tmp"

# Two builds: the package and a newer one (its version the other's with
# .pkgtest added, which dpkg orders after it).
mkdir -p "$tmp/debs"
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
export BUILD_DIR=$tmp/build DIST_DIR=$tmp/dist
SIGNAGENT_VERSION=$version.pkgtest scripts/package.sh >/dev/null || fail "building the newer package failed"
cp "$DIST_DIR"/signagent_*.deb "$tmp/debs/new.deb"
if [ -n "${PACKAGE_TEST_DEB:-}" ]; then
	[ -s "$PACKAGE_TEST_DEB" ] || fail "PACKAGE_TEST_DEB: $PACKAGE_TEST_DEB is missing"
	cp "$PACKAGE_TEST_DEB" "$tmp/debs/old.deb"
else
	scripts/package.sh >/dev/null || fail "building the package failed"
	cp "$DIST_DIR"/signagent_*.deb "$tmp/debs/old.deb"
fi
old_version=$(dpkg-deb -f "$tmp/debs/old.deb" Version)
new_version=$(dpkg-deb -f "$tmp/debs/new.deb" Version)
dpkg --compare-versions "$new_version" gt "$old_version" || fail "the newer build's version $new_version is not after $old_version"

prepare_root
podman import --quiet "$root" $image >/dev/null || fail "podman import $root failed"
built=$(date +%s)

podman run -d --name $name --systemd=always --network none --cap-add SYS_PTRACE -v "$tmp/debs:/debs:ro" $image /lib/systemd/systemd >/dev/null ||
	fail "podman run with systemd failed"
ex() { podman exec $name "$@"; }
state=
# Booting takes a few seconds here; a loaded machine may take many times
# that: up to 60 s, ending as soon as it is up.
for _ in $(seq 600); do
	state=$(ex systemctl is-system-running 2>/dev/null || true)
	case $state in running | degraded) break ;; esac
	sleep 0.1
done
case $state in running | degraded) ;; *) fail "systemd in the container did not come up: $state" ;; esac

# The agent's answers, over its socket.
metrics_version() {
	ex curl -sS --unix-socket /run/signagent/agent.sock http://agent/metrics |
		sed -n 's/^signagent_build_info{.*version="\([^"]*\)".*/\1/p'
}
main_pid() { ex systemctl show -p MainPID --value signagent.service; }

# A first install: the user and directories, nothing enabled or started.
out=$(ex dpkg -i /debs/old.deb 2>&1) || fail "dpkg -i (install) failed: $out"
ex id signagent >/dev/null || fail "the install made no user signagent"
[ "$(ex stat -c '%a %U %G' /etc/signagent)" = "750 root signagent" ] || fail "/etc/signagent is $(ex stat -c '%a %U %G' /etc/signagent), want 750 root signagent"
for u in signagent.socket signagent.service; do
	s=$(ex systemctl is-enabled $u 2>&1 || true)
	[ "$s" = disabled ] || fail "$u is $s after a first install, want disabled (it needs agent.yaml first)"
	s=$(ex systemctl is-active $u 2>&1 || true)
	[ "$s" = inactive ] || fail "$u is $s after a first install, want inactive"
done

# An agent for OpenID Connect alone, as an administrator sets it up: the
# client secret in /etc/signagent, no PIN and no API key file. The
# logrotate conffile edited, as an administrator may.
ex sh -c 'umask 077 && printf "pkgtest-client-secret\n" > /etc/signagent/client-secret' || fail "writing the client secret failed"
printf 'business-url: http://127.0.0.1:9/\noidc-url: http://127.0.0.1:9/\nclient-id: pkgtest\n' |
	podman exec -i $name sh -c 'cat > /etc/signagent/agent.yaml && chown root:signagent /etc/signagent/agent.yaml && chmod 0640 /etc/signagent/agent.yaml' ||
	fail "writing agent.yaml failed"
ex sh -c 'echo "# kept: the administrator'\''s edit" >> /etc/logrotate.d/signagent'
conf_sum=$(ex sha256sum /etc/signagent/agent.yaml)
rotate_sum=$(ex sha256sum /etc/logrotate.d/signagent)
ex test ! -e /etc/signagent/pin -a ! -e /etc/signagent/api-key || fail "the test left a PIN or API key file"
out=$(ex systemctl enable --now signagent.socket 2>&1) || fail "systemctl enable --now signagent.socket: $out"
# The first connection starts the service (socket activation).
ex /usr/bin/signagent agent status --probe ready --agent-sock /run/signagent/agent.sock >/dev/null 2>&1 ||
	fail "the agent started by its socket is not ready: $(ex systemctl status --no-pager -n 5 signagent.service 2>&1 | tail -n 5)"
pid1=$(main_pid)
[ "$pid1" -gt 0 ] || fail "signagent.service has no main PID after its first connection"
[ "$(metrics_version)" = "$version" ] || fail "the installed agent answers version $(metrics_version), want $version"
env1=$(ex cat /proc/"$pid1"/environ | tr '\0' '\n')
grep -q '^SIGNAGENT_CLIENT_SECRET_FILE=/run/credentials/signagent.service/client-secret$' <<<"$env1" ||
	fail "the unit did not hand the agent its client secret: $(grep ^SIGNAGENT_ <<<"$env1" | tr '\n' ' ')"
grep -q '^SIGNAGENT_\(PIN\|API_KEY\)_FILE=' <<<"$env1" &&
	fail "the unit handed an agent without PIN and API key files a PIN or API key: $(grep ^SIGNAGENT_ <<<"$env1" | tr '\n' ' ')"
[ "$(ex stat -c %U /proc/"$pid1")" = signagent ] || fail "the agent does not run as signagent"

# The upgrade: the running agent restarted on the new binary.
out=$(ex dpkg -i /debs/new.deb 2>&1) || fail "dpkg -i (upgrade) failed: $out"
pid2=$(main_pid)
[ "$pid2" -gt 0 ] || fail "signagent.service is not running after the upgrade: $(ex systemctl is-active signagent.service signagent.socket | tr '\n' ' ')"
[ "$pid2" != "$pid1" ] || fail "the upgrade did not restart the agent (PID $pid1 still)"
ex test ! -e /proc/"$pid1" || fail "the old agent, PID $pid1, still runs after the upgrade"
[ "$(metrics_version)" = "$version.pkgtest" ] || fail "after the upgrade the agent answers version $(metrics_version), want $version.pkgtest"
[ "$(ex systemctl is-enabled signagent.socket)" = enabled ] || fail "the upgrade did not keep signagent.socket enabled"
[ "$(ex sha256sum /etc/signagent/agent.yaml)" = "$conf_sum" ] || fail "the upgrade changed /etc/signagent/agent.yaml"
[ "$(ex sha256sum /etc/logrotate.d/signagent)" = "$rotate_sum" ] || fail "the upgrade did not keep the edited /etc/logrotate.d/signagent"
ex test -f /var/lib/signagent/audit.log || fail "the agent made no audit log in /var/lib/signagent: $(ex ls -la /var/lib/signagent)"

# A PIN file added (a PIN alone names no token: the agent still serves
# OpenID Connect alone) and an empty API key file: the restarted agent is
# handed the PIN and not the empty file.
ex sh -c 'umask 077 && printf "123456\n" > /etc/signagent/pin && : > /etc/signagent/api-key' || fail "writing the PIN file failed"
out=$(ex systemctl restart signagent.service 2>&1) || fail "systemctl restart signagent.service with a PIN file: $out"
pid3=$(main_pid)
[ "$pid3" -gt 0 ] || fail "signagent.service is not running with a PIN file"
env3=$(ex cat /proc/"$pid3"/environ | tr '\0' '\n')
grep -q '^SIGNAGENT_PIN_FILE=/run/credentials/signagent.service/pin$' <<<"$env3" ||
	fail "the unit did not hand the agent its PIN file: $(grep ^SIGNAGENT_ <<<"$env3" | tr '\n' ' ')"
grep -q '^SIGNAGENT_API_KEY_FILE=' <<<"$env3" && fail "the unit handed the agent an empty API key file"
ex rm /etc/signagent/pin /etc/signagent/api-key

# Remove: the agent and its socket stopped, the configuration kept.
out=$(ex dpkg -r signagent 2>&1) || fail "dpkg -r failed: $out"
for u in signagent.service signagent.socket; do
	s=$(ex systemctl is-active $u 2>&1 || true)
	[ "$s" = inactive ] || fail "$u is $s after remove, want inactive"
done
ex test ! -e /proc/"$pid3" || fail "the agent, PID $pid3, still runs after remove"
ex test ! -e /run/signagent/agent.sock || fail "the socket /run/signagent/agent.sock is left after remove"
ex test ! -e /usr/bin/signagent || fail "/usr/bin/signagent is left after remove"
[ "$(ex sha256sum /etc/signagent/agent.yaml 2>&1)" = "$conf_sum" ] || fail "remove did not keep /etc/signagent/agent.yaml"
[ "$(ex sha256sum /etc/logrotate.d/signagent 2>&1)" = "$rotate_sum" ] || fail "remove did not keep /etc/logrotate.d/signagent"
ex test -L /etc/systemd/system/sockets.target.wants/signagent.socket || fail "remove did not keep signagent.socket's enablement (purge removes it)"
for u in signagent.service signagent.socket; do
	[ "$(ex readlink /etc/systemd/system/$u 2>&1)" = /dev/null ] || fail "remove did not mask $u (disabled while the package is gone)"
done

# Purge: the configuration and the enablement gone, the audit log kept.
out=$(ex dpkg -P signagent 2>&1) || fail "dpkg -P failed: $out"
for f in /etc/signagent /etc/logrotate.d/signagent /etc/systemd/system/sockets.target.wants/signagent.socket \
	/etc/systemd/system/signagent.socket /etc/systemd/system/signagent.service \
	/var/lib/systemd/deb-systemd-helper-enabled/signagent.socket.dsh-also; do
	ex test ! -e $f -a ! -L $f || fail "$f is left after purge"
done
ex test -f /var/lib/signagent/audit.log || fail "purge removed the audit log /var/lib/signagent/audit.log"
end=$(date +%s)
echo "package-install-test: $old_version installed, upgraded to $new_version, removed and purged under systemd: ok (root and builds $((built - start)) s, systemd test $((end - built)) s)"
