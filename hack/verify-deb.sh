#!/usr/bin/env bash
# hack/verify-deb.sh — check the Debian package without installing it.
#
# Usage: hack/verify-deb.sh [DEB]     (exit 0 = good)
#   Without DEB, builds one with hack/deb.sh (into its default target/deb/).
# Reads the package with dpkg-deb only (--info, --contents, -R into a temporary directory,
# removed on exit) and checks:
#   - control: Package, Version (the file name's; Cargo.toml's when built here), Architecture
#     (dpkg --print-architecture), Maintainer, Depends (libc6, and a package for each shared
#     library the binary loads here), Recommends (containerd),
#     Section, Priority, Description, Installed-Size;
#   - contents: exactly the expected paths, modes, root:root; the md5sums;
#   - the unit is systemd/crilet.service with ExecStart=/usr/bin/crilet (lib.sh's crilet_unit,
#     which install.sh uses) and nothing else changed; hack/verify-unit.sh passes on it
#     (KillMode=process, ...); it has StateDirectory= and RuntimeDirectory= (the package ships
#     neither /var/lib/crilet nor /run/crilet);
#   - /etc/crilet/config.yaml is systemd/config.yaml and the only conffile; the binary runs;
#   - the maintainer scripts are systemd/debian's, pass `sh -n` and shellcheck (when installed),
#     and do what each dpkg action should: they are run with stub systemctl, deb-systemd-helper
#     and deb-systemd-invoke that record their calls, as in a chroot (no /run/systemd/system)
#     and, in a private mount namespace whose /run is a tmpfs holding /run/systemd/system, as on
#     a systemd node (skipped where unshare(1) cannot do that); purge runs with DPKG_ROOT set
#     to a temporary tree, so nothing of this host's is touched;
#   - lintian, when installed: its output is shown, it never fails the check.
# shellcheck disable=SC2015  # `test && ok || bad`: ok() only prints, it cannot fail
set -euo pipefail
. "$(dirname "$0")/lib.sh"

DEB="${1:-}"
cargo_version="$(crate_version)"
if [ -z "$DEB" ]; then
    DEB="$(bash "$HACK_DIR/deb.sh" | tail -n1)"
    expected_version="${cargo_version//-/\~}"
else
    expected_version=""
fi
[ -f "$DEB" ] || die "no package at $DEB"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
ok() { echo "ok:   $*"; }

# --- control -----------------------------------------------------------------------------------
field() { dpkg-deb --field "$DEB" "$1"; }
arch="$(dpkg --print-architecture)"
version="$(field Version)"
[ "$(field Package)" = crilet ] && ok "Package: crilet" || bad "Package is '$(field Package)', not crilet"
[ "$(basename "$DEB")" = "crilet_${version}_${arch}.deb" ] && ok "file name crilet_${version}_${arch}.deb" ||
    bad "file name $(basename "$DEB") does not match Version $version and Architecture $arch"
if [ -n "$expected_version" ]; then
    [ "$version" = "$expected_version" ] && ok "Version: $version (Cargo.toml)" || bad "Version $version, Cargo.toml says $expected_version"
fi
[ "$(field Architecture)" = "$arch" ] && ok "Architecture: $arch" || bad "Architecture is '$(field Architecture)', not $arch"
# check_field NAME ERE — the field matches.
check_field() {
    local v
    v="$(field "$1")"
    if grep -qE "$2" <<<"$v"; then ok "$1: $(head -n1 <<<"$v")"; else bad "$1 is '$v' (wanted /$2/)"; fi
}
check_field Maintainer '^[^<>]+ <[^<>@ ]+@[^<>@ ]+>$'
check_field Depends '(^|, )libc6 \(>= [0-9.]+\)'
check_field Recommends '(^|, )containerd($|[ ,])'
check_field Section '^admin$'
check_field Priority '^optional$'
check_field Installed-Size '^[0-9]+$'
synopsis="$(field Description | sed -n 1p)"  # not head: with pipefail, SIGPIPE
[ -n "$synopsis" ] && [ "${#synopsis}" -le 80 ] && [ "$(field Description | wc -l)" -gt 1 ] &&
    ok "Description: $synopsis (+ $(($(field Description | wc -l) - 1)) lines)" ||
    bad "Description needs a synopsis of at most 80 characters and a long description"

# --- contents ----------------------------------------------------------------------------------
dpkg-deb --contents "$DEB" | awk '{print $1, $2, $6}' | sort -k3 >"$tmp/contents"
sort -k3 >"$tmp/expected" <<'EOF'
drwxr-xr-x root/root ./
drwxr-xr-x root/root ./etc/
drwxr-xr-x root/root ./etc/crilet/
-rw-r--r-- root/root ./etc/crilet/config.yaml
drwxr-xr-x root/root ./etc/crilet/manifests/
drwxr-xr-x root/root ./lib/
drwxr-xr-x root/root ./lib/systemd/
drwxr-xr-x root/root ./lib/systemd/system/
-rw-r--r-- root/root ./lib/systemd/system/crilet.service
drwxr-xr-x root/root ./usr/
drwxr-xr-x root/root ./usr/bin/
-rwxr-xr-x root/root ./usr/bin/crilet
drwxr-xr-x root/root ./usr/share/
drwxr-xr-x root/root ./usr/share/doc/
drwxr-xr-x root/root ./usr/share/doc/crilet/
-rw-r--r-- root/root ./usr/share/doc/crilet/changelog.Debian.gz
-rw-r--r-- root/root ./usr/share/doc/crilet/copyright
EOF
if diff -u "$tmp/expected" "$tmp/contents" >"$tmp/contents.diff"; then
    ok "contents: $(wc -l <"$tmp/contents") entries, modes and root:root as expected"
else
    bad "contents differ from the expected list (- expected, + package):"
    cat "$tmp/contents.diff" >&2
fi

x="$tmp/x"
dpkg-deb -R "$DEB" "$x"
(cd "$x" && md5sum --quiet -c DEBIAN/md5sums) >&2 && ok "md5sums match" || bad "DEBIAN/md5sums do not match the files"

# --- unit, config, binary ----------------------------------------------------------------------
crilet_unit /usr/bin "$tmp/crilet.service"
unit="$x/lib/systemd/system/crilet.service"
cmp -s "$tmp/crilet.service" "$unit" && ok "unit is systemd/crilet.service with ExecStart=/usr/bin/crilet" ||
    { bad "unit differs from systemd/crilet.service rendered for /usr/bin:"; diff -u "$tmp/crilet.service" "$unit" >&2 || true; }
changed="$(diff "$REPO_ROOT/systemd/crilet.service" "$unit" | grep -c '^[<>]' || true)"
[ "$changed" = 2 ] && ok "unit: one line differs from systemd/crilet.service (ExecStart)" ||
    bad "unit: $changed changed lines against systemd/crilet.service (expected the ExecStart line only)"
bash "$HACK_DIR/verify-unit.sh" "$unit" && ok "hack/verify-unit.sh on the packaged unit" ||
    bad "hack/verify-unit.sh fails on the packaged unit"
for d in StateDirectory=crilet RuntimeDirectory=crilet; do
    grep -qx "$d" "$unit" && ok "unit: $d (systemd makes the directory)" || bad "unit: no $d, and the package does not ship it"
done
if grep -qE '^Exec(Stop|StopPost|Reload)=' "$unit"; then bad "unit: an ExecStop/ExecStopPost/ExecReload could touch pods"; fi

cmp -s "$REPO_ROOT/systemd/config.yaml" "$x/etc/crilet/config.yaml" && ok "config.yaml is systemd/config.yaml" ||
    bad "etc/crilet/config.yaml differs from systemd/config.yaml"
[ "$(cat "$x/DEBIAN/conffiles" 2>/dev/null)" = /etc/crilet/config.yaml ] && ok "conffiles: /etc/crilet/config.yaml" ||
    bad "DEBIAN/conffiles is '$(cat "$x/DEBIAN/conffiles" 2>/dev/null)', expected /etc/crilet/config.yaml alone"

if out="$("$x/usr/bin/crilet" --version 2>&1 | sed -n 1p)" && grep -qwF "$cargo_version" <<<"$out"; then
    ok "usr/bin/crilet --version: $out"
else
    bad "usr/bin/crilet --version: '$out' (wanted Cargo.toml's $cargo_version)"
fi

# Every shared library the binary loads here comes from a package Depends names.
depends="$(field Depends)"
for lib in $(ldd "$x/usr/bin/crilet" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'); do
    pkg="$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || true)"
    pkg="${pkg%%:*}"
    if [ -z "$pkg" ]; then
        echo "note: $lib belongs to no package here; not checked against Depends"
    elif grep -qE "(^|, )$pkg( |,|$)" <<<"$depends"; then
        ok "Depends covers $(basename "$lib") ($pkg)"
    else
        bad "the binary loads $lib from $pkg, which Depends ($depends) does not name"
    fi
done

# --- maintainer scripts ------------------------------------------------------------------------
for s in postinst prerm postrm; do
    f="$x/DEBIAN/$s"
    [ -x "$f" ] || { bad "DEBIAN/$s missing or not executable"; continue; }
    cmp -s "$f" "$REPO_ROOT/systemd/debian/$s" || bad "DEBIAN/$s differs from systemd/debian/$s"
    sh -n "$f" && ok "$s: sh -n" || bad "$s: sh -n"
    if command -v shellcheck >/dev/null; then
        shellcheck -s sh "$f" && ok "$s: shellcheck" || bad "$s: shellcheck"
    fi
done
command -v shellcheck >/dev/null || echo "note: shellcheck is not installed; skipped"

# Stubs: every call is appended to $calls. deb-systemd-helper's was-enabled answers $WAS_ENABLED.
calls="$tmp/calls"
stubs="$tmp/stubs"
mkdir -p "$stubs/all" "$stubs/plain" "$stubs/tools"
for t in systemctl deb-systemd-helper deb-systemd-invoke; do
    cat >"$stubs/all/$t" <<EOF
#!/bin/sh
echo "$t \$*" >>"$calls"
if [ "$t" = deb-systemd-helper ] && [ "\$2" = was-enabled ]; then exit "\$((1 - \${WAS_ENABLED:-1}))"; fi
exit 0
EOF
    chmod 0755 "$stubs/all/$t"
done
# "plain": systemctl alone (no init-system-helpers).
cp "$stubs/all/systemctl" "$stubs/plain/systemctl"
# The only outside tool the scripts use besides these.
ln -s "$(command -v rm)" "$stubs/tools/rm"

NS_OK=0
if unshare -m sh -c 'mount -t tmpfs verify-deb /run && mkdir -p /run/systemd/system' 2>/dev/null; then NS_OK=1; fi

# scenario LABEL SYSTEMD(0|1) HELPERS(all|plain) WAS_ENABLED(0|1) SCRIPT ARG... <<EXPECTED
# Runs DEBIAN/SCRIPT ARG...; the calls it made must be EXPECTED (stdin), line for line.
scenario() {
    local label="$1" systemd="$2" helpers="$3" was="$4" script="$5"
    shift 5
    local expected
    expected="$(cat)"
    if [ "$systemd" = 1 ] && [ "$NS_OK" = 0 ]; then
        echo "skip: $label (unshare cannot fake a systemd node here)"
        return
    fi
    : >"$calls"
    local run=(env -i PATH="$stubs/$helpers:$stubs/tools" WAS_ENABLED="$was" DPKG_ROOT="${DPKG_ROOT:-}"
        "$(command -v sh)" "$x/DEBIAN/$script" "$@")
    if [ "$systemd" = 1 ]; then
        unshare -m sh -c 'mount -t tmpfs verify-deb /run && mkdir -p /run/systemd/system && exec "$@"' sh "${run[@]}" ||
            { bad "$label: $script $* failed"; return; }
    else
        if [ -d /run/systemd/system ]; then echo "skip: $label (this host runs systemd)"; return; fi
        "${run[@]}" || { bad "$label: $script $* failed"; return; }
    fi
    if [ "$(cat "$calls")" = "$expected" ]; then
        ok "$label"
    else
        bad "$label: $script $* made these calls:"
        sed 's/^/    /' "$calls" >&2
        echo "  expected:" >&2
        printf '%s\n' "$expected" | sed 's/^/    /' >&2
    fi
}

scenario "fresh install on a systemd node: enabled, reloaded, not started" 1 all 1 postinst configure <<'EOF'
deb-systemd-helper unmask crilet.service
deb-systemd-helper --quiet was-enabled crilet.service
deb-systemd-helper enable crilet.service
systemctl --system daemon-reload
EOF
scenario "upgrade on a systemd node: prerm stops nothing" 1 all 1 prerm upgrade 0.1.0+1 <<'EOF'
EOF
scenario "upgrade on a systemd node: postinst reloads, restarts only if running (try-restart)" 1 all 1 postinst configure 0.0.9 <<'EOF'
deb-systemd-helper unmask crilet.service
deb-systemd-helper --quiet was-enabled crilet.service
deb-systemd-helper enable crilet.service
systemctl --system daemon-reload
deb-systemd-invoke try-restart crilet.service
EOF
scenario "upgrade after an admin's disable: stays disabled" 1 all 0 postinst configure 0.0.9 <<'EOF'
deb-systemd-helper unmask crilet.service
deb-systemd-helper --quiet was-enabled crilet.service
deb-systemd-helper update-state crilet.service
systemctl --system daemon-reload
deb-systemd-invoke try-restart crilet.service
EOF
scenario "failed upgrade rolled back: nothing to restart" 1 all 1 postinst abort-upgrade 0.1.0+1 <<'EOF'
deb-systemd-helper unmask crilet.service
deb-systemd-helper --quiet was-enabled crilet.service
deb-systemd-helper enable crilet.service
systemctl --system daemon-reload
EOF
scenario "remove on a systemd node: prerm stops the unit" 1 all 1 prerm remove <<'EOF'
deb-systemd-invoke stop crilet.service
EOF
scenario "remove on a systemd node: postrm reloads, keeps config, state and enablement" 1 all 1 postrm remove <<'EOF'
systemctl --system daemon-reload
EOF
scenario "no deb-systemd-helper, fresh install: systemctl enable, not started" 1 plain 1 postinst configure <<'EOF'
systemctl --quiet enable crilet.service
systemctl --system daemon-reload
EOF
scenario "no deb-systemd-invoke, upgrade: systemctl try-restart" 1 plain 1 postinst configure 0.0.9 <<'EOF'
systemctl --system daemon-reload
systemctl --system try-restart crilet.service
EOF
scenario "no deb-systemd-invoke, remove: systemctl stop" 1 plain 1 prerm remove <<'EOF'
systemctl --system stop crilet.service
EOF
scenario "chroot (no systemd): fresh install enables, asks systemd nothing" 0 all 1 postinst configure <<'EOF'
deb-systemd-helper unmask crilet.service
deb-systemd-helper --quiet was-enabled crilet.service
deb-systemd-helper enable crilet.service
EOF
scenario "chroot (no systemd): upgrade restarts nothing" 0 all 1 postinst configure 0.0.9 <<'EOF'
deb-systemd-helper unmask crilet.service
deb-systemd-helper --quiet was-enabled crilet.service
deb-systemd-helper enable crilet.service
EOF
scenario "chroot (no systemd): remove stops nothing" 0 all 1 prerm remove <<'EOF'
EOF

# Purge against a temporary root (DPKG_ROOT): config and state go, pod logs stay.
root="$tmp/root"
mkpurge() {
    rm -rf "$root"
    mkdir -p "$root/etc/crilet/manifests" "$root/var/lib/crilet/pods/x" "$root/var/log/pods/ns_p_u"
    mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
    echo "root-dir: /var/lib/crilet" >"$root/etc/crilet/config.yaml"
    echo "kind: Pod" >"$root/etc/crilet/manifests/p.yaml"
    echo "{}" >"$root/var/lib/crilet/pods/x/status.json"
    ln -s /lib/systemd/system/crilet.service "$root/etc/systemd/system/multi-user.target.wants/crilet.service"
}
purged() {
    local what="$1"
    if [ -e "$root/etc/crilet" ] || [ -e "$root/var/lib/crilet" ] || [ ! -d "$root/var/log/pods/ns_p_u" ]; then
        bad "$what: /etc/crilet and /var/lib/crilet must be gone, /var/log/pods kept: $(cd "$root" && find . | sort | tr '\n' ' ')"
    else
        ok "$what: /etc/crilet and /var/lib/crilet removed, /var/log/pods kept"
    fi
}
mkpurge
DPKG_ROOT="$root" scenario "purge: deb-systemd-helper purge (disables the unit)" 0 all 1 postrm purge <<'EOF'
deb-systemd-helper purge crilet.service
deb-systemd-helper unmask crilet.service
EOF
purged "purge"
mkpurge
DPKG_ROOT="$root" scenario "purge without deb-systemd-helper" 0 plain 1 postrm purge <<'EOF'
EOF
purged "purge without deb-systemd-helper"
[ -L "$root/etc/systemd/system/multi-user.target.wants/crilet.service" ] &&
    bad "purge without deb-systemd-helper left the enablement symlink" ||
    ok "purge without deb-systemd-helper: enablement symlink removed"

# A unit of hack/install.sh's in /etc/systemd/system would shadow the package's: postinst says so.
rm -rf "$root"
mkdir -p "$root/etc/systemd/system"
echo "[Service]" >"$root/etc/systemd/system/crilet.service"
said="$(env -i PATH="$stubs/all:$stubs/tools" DPKG_ROOT="$root" "$(command -v sh)" "$x/DEBIAN/postinst" configure 2>&1 >/dev/null)"
if grep -q "etc/systemd/system/crilet.service .*overrides the package's unit" <<<"$said"; then
    ok "postinst warns of a unit in /etc/systemd/system that overrides the package's"
else
    bad "postinst says nothing of a unit in /etc/systemd/system that overrides the package's"
fi

# --- lintian (advice only) ---------------------------------------------------------------------
if command -v lintian >/dev/null; then
    echo "lintian (shown for information; it does not fail this check):"
    lintian --no-tag-display-limit "$DEB" 2>&1 | sed 's/^/    /' || true
else
    echo "note: lintian is not installed; skipped"
fi

if [ "$fail" = 0 ]; then
    echo "$(basename "$DEB"): OK"
else
    echo "$(basename "$DEB"): FAILED" >&2
fi
exit "$fail"
