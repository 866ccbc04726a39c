#!/bin/sh
# Tests the Debian package (make test runs it): builds it, checks its file
# list, control fields and maintainer scripts, unpacks it into a scratch
# root and runs what it installed, checks the binary's hardening, and asks
# lintian --pedantic (no tag). scripts/package-install-test.sh installs,
# upgrades and removes it under systemd. The package is built in a
# directory of the test's own (BUILD_DIR, DIST_DIR: scripts/package.sh),
# so that dist/ is left as it was; with PACKAGE_TEST_DEB naming a package
# it builds none and tests that one (make test: the release's). Each
# failure says what is wrong and exits 1.
set -eu
cd "$(dirname "$0")/.."
fail() { echo "package-test: $*" >&2; exit 1; }
work=$(mktemp -d)
root=
units=
trap 'rm -rf "$work" "$root" "$units"' EXIT
if [ -n "${PACKAGE_TEST_DEB:-}" ]; then
	deb=$PACKAGE_TEST_DEB
	[ -s "$deb" ] || fail "PACKAGE_TEST_DEB: $deb is missing"
else
	BUILD_DIR=$work/build DIST_DIR=$work/dist scripts/package.sh >/dev/null
	deb=$(ls "$work"/dist/signagent_*_"$(dpkg --print-architecture)".deb)
fi
list=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/signagent \
	./usr/lib/systemd/system/signagent.service ./usr/lib/systemd/system/signagent.socket \
	./usr/lib/systemd/user/signagent.service ./usr/lib/systemd/user/signagent.socket \
	./usr/lib/sysusers.d/signagent.conf ./usr/lib/tmpfiles.d/signagent.conf ./etc/logrotate.d/signagent \
	./usr/share/bash-completion/completions/signagent ./usr/share/zsh/vendor-completions/_signagent \
	./usr/share/fish/vendor_completions.d/signagent.fish ./usr/share/man/man1/signagent.1.gz \
	./usr/share/doc/signagent/copyright ./usr/share/doc/signagent/changelog.gz \
	./usr/share/doc/signagent/examples/card-reader.conf ./usr/share/polkit-1/rules.d/50-signagent-pcscd.rules \
	./usr/share/lintian/overrides/signagent; do
	echo "$list" | grep -qx "$f" || fail "$deb lacks $f"
done
echo "$list" | grep -q emulator && fail "$deb ships the emulator; it ships signagent alone"
dpkg-deb -f "$deb" Depends | grep '^libc6' >/dev/null || fail "$deb does not depend on libc6 (the binary uses cgo)"
dpkg-deb -f "$deb" Recommends | grep 'bash-completion' >/dev/null || fail "$deb does not recommend bash-completion (its completion is loaded by it)"
for script in postinst prerm postrm; do
	dpkg-deb -I "$deb" $script >/dev/null 2>&1 || fail "$deb has no $script"
done
dpkg-deb -I "$deb" prerm | grep 'deb-systemd-invoke stop' >/dev/null || fail "$deb's prerm does not stop the units"
dpkg-deb -I "$deb" postinst | grep 'deb-systemd-invoke try-restart' >/dev/null || fail "$deb's postinst does not restart the units"
dpkg-deb -I "$deb" postrm | grep 'deb-systemd-helper purge' >/dev/null || fail "$deb's postrm does not disable the units on purge"
dpkg-deb -f "$deb" Conffiles 2>/dev/null | grep /etc/logrotate.d/signagent >/dev/null || \
	dpkg-deb -I "$deb" conffiles | grep /etc/logrotate.d/signagent >/dev/null || fail "the logrotate snippet is not a conffile"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg -x "$deb" "$root"
grep -qx '[[:space:]]*su signagent signagent' "$root/etc/logrotate.d/signagent" || \
	fail "the logrotate snippet does not rotate the audit log as the agent's user (su signagent signagent)"
bin=$root/usr/bin/signagent
# Hardened as Debian's packages are: full RELRO (a read-only segment after
# relocation, and every symbol bound at start: BIND_NOW) and a PIE.
readelf -lW "$bin" | grep -q GNU_RELRO || fail "the binary has no RELRO segment"
readelf -dW "$bin" | grep -q '(FLAGS) *BIND_NOW' || fail "the binary is not linked with -z now (no BIND_NOW): partial RELRO"
readelf -dW "$bin" | grep -q 'Flags: NOW PIE' || fail "the binary is not a PIE bound now: $(readelf -dW "$bin" | grep FLAGS_1)"
readelf -SW "$bin" | grep -q ' \.comment ' && fail "the binary keeps its .comment section (dh_strip removes it)"
"$bin" version | grep -q '^signagent ' || fail "the installed binary does not run: $("$bin" version 2>&1)"
"$bin" --help | grep -q 'completion' || fail "the installed binary's help lacks its commands"
bash -n "$root/usr/share/bash-completion/completions/signagent" || fail "the bash completion does not load"
zsh -n "$root/usr/share/zsh/vendor-completions/_signagent" || fail "the zsh completion does not load"
fish -n "$root/usr/share/fish/vendor_completions.d/signagent.fish" || fail "the fish completion does not load"
warn=$(zcat "$root/usr/share/man/man1/signagent.1.gz" | groff -man -Tutf8 -ww -z 2>&1) || fail "the manual page does not render"
[ -z "$warn" ] || fail "the manual page renders with warnings: $warn"
grep -q 'exec /usr/bin/signagent ' "$root/usr/lib/systemd/system/signagent.service" || fail "the system unit does not run /usr/bin/signagent"
grep -v '^#' "$root/usr/lib/systemd/system/signagent.service" | grep -q /usr/local/bin && fail "the system unit runs something in /usr/local/bin"
grep -q '^ExecStart=/usr/bin/signagent ' "$root/usr/lib/systemd/user/signagent.service" || fail "the user unit does not run /usr/bin/signagent"
if command -v systemd-analyze >/dev/null 2>&1; then
	for u in system/signagent.socket user/signagent.socket; do
		out=$(systemd-analyze verify --man=no "$root/usr/lib/systemd/$u" 2>&1 | grep -v 'Failed to \(connect\|setup\)\|not found\|Command /usr/bin/signagent' || true)
		[ -z "$out" ] || fail "systemd-analyze verify $u: $out"
	done
fi
# The polkit rule, run by duktape (the engine Debian's polkitd 122 runs
# rules with; polkitd has no offline checker) under a stand-in for the
# polkit object polkitd defines (addRule, the first rule answering wins,
# Result): it must parse, allow the user signagent both pcsc-lite actions,
# and answer nothing for another user or another action.
rule=$root/usr/share/polkit-1/rules.d/50-signagent-pcscd.rules
dpkg-deb -c "$deb" | grep '^-rw-r--r-- root/root .* \./usr/share/polkit-1/rules.d/50-signagent-pcscd.rules$' >/dev/null || \
	fail "the polkit rule is not a 0644 file owned by root"
command -v duk >/dev/null 2>&1 || fail "duk is missing: apt-get install duktape (the JavaScript engine of Debian's polkitd) to check the polkit rule"
cat > "$root/polkit.js" <<'JS'
var polkit = {_ruleFuncs: [], Result: {NO: "no", YES: "yes", AUTH_SELF: "auth_self", AUTH_SELF_KEEP: "auth_self_keep",
	AUTH_ADMIN: "auth_admin", AUTH_ADMIN_KEEP: "auth_admin_keep", NOT_HANDLED: null}};
polkit.addRule = function(f) { this._ruleFuncs.push(f); };
polkit.addAdminRule = function(f) {};
polkit.log = function(s) {};
JS
cat > "$root/check.js" <<'JS'
function run(id, user) {
	var action = {id: id, lookup: function(k) { return k == "reader" ? "Virtual PCD 00 00" : undefined; }};
	var subject = {user: user, pid: 1, local: false, active: false, isInGroup: function(g) { return false; }};
	for (var n = 0; n < polkit._ruleFuncs.length; n++) {
		var r = polkit._ruleFuncs[n](action, subject);
		if (r) return r;
	}
	return null;
}
var want = [["org.debian.pcsc-lite.access_pcsc", "signagent", "yes"], ["org.debian.pcsc-lite.access_card", "signagent", "yes"],
	["org.debian.pcsc-lite.access_pcsc", "nobody", null], ["org.debian.pcsc-lite.access_card", "signagent-clients", null],
	["org.freedesktop.systemd1.manage-units", "signagent", null]];
for (var i = 0; i < want.length; i++) {
	var got = run(want[i][0], want[i][1]);
	if (got !== want[i][2]) throw new Error(want[i][0] + " for " + want[i][1] + ": " + got + ", want " + want[i][2]);
}
JS
out=$(duk "$root/polkit.js" "$rule" "$root/check.js" 2>&1) || fail "the polkit rule: $out"
# The card-reader drop-in, on the system unit as installed.
units=$(mktemp -d)
cp "$root/usr/lib/systemd/system/signagent.service" "$root/usr/lib/systemd/system/signagent.socket" "$units/"
mkdir "$units/signagent.service.d"
cp "$root/usr/share/doc/signagent/examples/card-reader.conf" "$units/signagent.service.d/"
if command -v systemd-analyze >/dev/null 2>&1; then
	out=$(systemd-analyze verify --man=no "$units/signagent.service" 2>&1 | grep -v 'Failed to \(connect\|setup\)\|not found\|Command /usr/bin/signagent' || true)
	[ -z "$out" ] || fail "systemd-analyze verify signagent.service with card-reader.conf: $out"
fi
# lintian, pedantic, with the suppressions scripts/lintian.sh gives reasons for.
out=$(scripts/lintian.sh "$deb" 2>&1) || fail "$out"
echo "package-test: $deb ($(du -k "$deb" | cut -f1) KiB, $(echo "$list" | grep -vc '/$') files): ok"
