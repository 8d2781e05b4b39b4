#!/usr/bin/env bash
# hack/deb.sh — build the Debian package crilet_<version>_<arch>.deb with dpkg-deb alone.
#
# Usage: hack/deb.sh [--out DIR] [--version VERSION] [--compression xz|gzip|none]
#   --out DIR (or CRILET_DEB_DIR): where the .deb goes; default target/deb/ (under
#       CARGO_TARGET_DIR when that is set). Its path is printed on stdout.
#   --version VERSION (or CRILET_DEB_VERSION): the package's version; default Cargo.toml's (a
#       pre-release's `-` becomes `~`, so 0.2.0-rc.1 sorts before 0.2.0). Give a higher one to
#       make an upgrade of the same code (e.g. 0.1.0+1).
#   --compression TYPE (or CRILET_DEB_COMPRESSION): dpkg-deb's -Z; default xz, as Debian ships.
#       The guest's package test gives `none`: its unoptimized binary takes half a minute to
#       xz and long to unpack under TCG, and the package's contents are the same.
# Builds `cargo build --release --locked` (niced; CRILET_BIN=path packages that binary instead),
# then stages the tree with hack/install.sh (DESTDIR, /usr prefix, /lib/systemd/system), so the
# package holds exactly what install.sh installs, the binary and unit at their Debian places:
#   /usr/bin/crilet                      0755, the release binary
#   /lib/systemd/system/crilet.service   systemd/crilet.service, ExecStart=/usr/bin/crilet
#   /etc/crilet/config.yaml              systemd/config.yaml: a conffile (DEBIAN/conffiles)
#   /etc/crilet/manifests/               0755, empty
#   /usr/share/crilet/kubeadm.conf       systemd/kubeadm.conf, the drop-in for kubeadm nodes
#   /usr/share/doc/crilet/               copyright, changelog.Debian.gz
# /var/lib/crilet and /run/crilet are the unit's StateDirectory= and RuntimeDirectory=:
# systemd makes them. Maintainer scripts: systemd/debian/{postinst,prerm,postrm}. Depends from
# dpkg-shlibdeps (dpkg-dev), else libc6 and libgcc-s1 (>= the highest symbol versions the
# binary asks for);
# Recommends: containerd (any CRI runtime will do: --container-runtime-endpoint).
# Maintainer: DEBFULLNAME/DEBEMAIL, else this repository's git user.
# The staging tree is a temporary directory, removed on exit; only the .deb stays.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

OUT="${CRILET_DEB_DIR:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/deb}"
VERSION="${CRILET_DEB_VERSION:-}"
COMPRESSION="${CRILET_DEB_COMPRESSION:-xz}"
while [ "$#" -gt 0 ]; do
    case "$1" in
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --version) VERSION="${2:?--version needs a version}"; shift 2 ;;
        --compression) COMPRESSION="${2:?--compression needs xz, gzip or none}"; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (see hack/deb.sh --help)" ;;
    esac
done

for tool in dpkg-deb dpkg gzip md5sum; do
    command -v "$tool" >/dev/null || die "$tool is not installed (it comes with dpkg, gzip, coreutils)"
done
if [ -z "$VERSION" ]; then
    VERSION="$(crate_version)"
    [ -n "$VERSION" ] || die "no [package] version in $REPO_ROOT/Cargo.toml"
    VERSION="${VERSION//-/\~}"
fi
dpkg --validate-version "$VERSION" 2>/dev/null || die "'$VERSION' is not a Debian version"
case "$COMPRESSION" in
    xz | gzip | none) ;;
    *) die "--compression $COMPRESSION: dpkg-deb here takes xz, gzip or none" ;;
esac
ARCH="$(dpkg --print-architecture)"
DEB="$OUT/crilet_${VERSION}_${ARCH}.deb"
# Reproducible timestamps: dpkg-deb clamps the files' times to this and stamps the archive. Given
# to dpkg-deb alone: cargo would rebuild every crate that compiles C (cc-rs watches the variable).
epoch="${SOURCE_DATE_EPOCH:-$(git -C "$REPO_ROOT" log -1 --format=%ct 2>/dev/null || date +%s)}"

if [ -n "${CRILET_BIN:-}" ]; then
    BIN="$CRILET_BIN"
    log "packaging $BIN (CRILET_BIN; no build)"
else
    log "building the release binary (cargo build --release --locked; ~20 min cold on 2 cores)"
    (cd "$REPO_ROOT" && nice -n 10 cargo build --release --locked) || die "cargo build --release --locked failed"
    BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/crilet"
fi
[ -x "$BIN" ] || die "no crilet binary at $BIN"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# debian/crilet: where dpkg-shlibdeps expects the package's files (named in debian/control).
mkdir -p "$tmp/debian"
printf 'Source: crilet\n\nPackage: crilet\nArchitecture: any\n' >"$tmp/debian/control"
ROOT="$tmp/debian/crilet"
install -d -m 0755 "$ROOT"

DESTDIR="$ROOT" CRILET_BIN="$BIN" CRILET_PREFIX=/usr CRILET_UNIT_DIR=/lib/systemd/system \
    bash "$HACK_DIR/install.sh" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; die "hack/install.sh failed"; }

# Maintainer: Debian's own variables, else the repository's git identity.
MAINTAINER_NAME="${DEBFULLNAME:-$(git -C "$REPO_ROOT" config user.name 2>/dev/null || echo "crilet maintainers")}"
MAINTAINER_EMAIL="${DEBEMAIL:-$(git -C "$REPO_ROOT" config user.email 2>/dev/null || echo "root@localhost")}"
MAINTAINER="$MAINTAINER_NAME <$MAINTAINER_EMAIL>"
COMMIT="$(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git -C "$REPO_ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    COMMIT="$COMMIT with uncommitted changes"
fi

DOC="$ROOT/usr/share/doc/crilet"
install -d -m 0755 "$DOC"
cat >"$DOC/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: crilet

Files: *
Copyright: the crilet authors
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 can be found in
 /usr/share/common-licenses/Apache-2.0.
EOF
{
    echo "crilet ($VERSION) unstable; urgency=medium"
    echo
    echo "  * Built from git $COMMIT by hack/deb.sh."
    echo
    echo " -- $MAINTAINER  $(date -u -R -d "@$epoch")"
} | gzip -9n >"$DOC/changelog.Debian.gz"
chmod 0644 "$DOC/copyright" "$DOC/changelog.Debian.gz"

# Depends: the shared libraries the binary links, as their packages.
depends=""
if command -v dpkg-shlibdeps >/dev/null; then
    depends="$(cd "$tmp" && dpkg-shlibdeps -O debian/crilet/usr/bin/crilet 2>"$tmp/shlibdeps.log" |
        sed -n 's/^shlibs:Depends=//p')" || { cat "$tmp/shlibdeps.log" >&2; die "dpkg-shlibdeps failed"; }
fi
if [ -z "$depends" ]; then
    # No dpkg-shlibdeps (dpkg-dev): a Rust binary links glibc and libgcc_s; each minimum is the
    # highest symbol version the binary asks for (GLIBC_2.34 -> 2.34, GCC_4.2.0 -> 4.2).
    command -v objdump >/dev/null || die "neither dpkg-shlibdeps (dpkg-dev) nor objdump (binutils) to compute Depends"
    # highest_version PREFIX — the binary's highest PREFIXx.y[.z] symbol version, as x.y[.z].
    highest_version() { objdump -T "$BIN" | grep -o "$1[0-9.]*" | sed "s/^$1//; s/\.0\$//" | sort -uV | tail -n1; }
    for lib in $(objdump -p "$BIN" | awk '$1 == "NEEDED" {print $2}'); do
        case "$lib" in
            libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux*)
                dep="libc6 (>= $(highest_version GLIBC_))" ;;
            libgcc_s.so.1) dep="libgcc-s1 (>= $(highest_version GCC_))" ;;
            *) die "$BIN needs $lib; install dpkg-dev (dpkg-shlibdeps) to compute Depends" ;;
        esac
        case ", $depends, " in *", $dep, "*) ;; *) depends="${depends:+$depends, }$dep" ;; esac
    done
    case "$depends" in *"(>= )"*) die "could not read the symbol versions of $BIN (Depends: $depends)" ;; esac
fi

install -d -m 0755 "$ROOT/DEBIAN"
# dh_installdeb's rule: every file under /etc is a conffile.
(cd "$ROOT" && find etc -type f | sed 's#^#/#' | sort) >"$ROOT/DEBIAN/conffiles"
# md5sums of everything else (dpkg --verify; conffiles have their own sums in dpkg's status).
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 md5sum) >"$ROOT/DEBIAN/md5sums"
installed_size="$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)"
cat >"$ROOT/DEBIAN/control" <<EOF
Package: crilet
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $installed_size
Depends: $depends
Recommends: containerd
Section: admin
Priority: optional
Description: kubelet-faithful node agent running Pod manifests on containerd
 crilet runs Kubernetes Pods on one node: it reads Pod manifests from
 /etc/crilet/manifests (and, given a kubeconfig, pods the API server binds to
 the node) and speaks CRI to containerd to pull images, run sandboxes and
 containers, run probes, restart what must restart, update images in place
 and stop everything in order inside one grace budget.
 .
 The crilet.service unit is enabled on installation but not started. Stopping
 or restarting the agent, upgrading the package included, stops no container.
EOF
for script in postinst prerm postrm; do
    install -m 0755 "$REPO_ROOT/systemd/debian/$script" "$ROOT/DEBIAN/$script"
done
chmod 0644 "$ROOT/DEBIAN/control" "$ROOT/DEBIAN/conffiles" "$ROOT/DEBIAN/md5sums"

mkdir -p "$OUT"
SOURCE_DATE_EPOCH="$epoch" dpkg-deb --root-owner-group -Z"$COMPRESSION" --build "$ROOT" "$DEB.tmp" >/dev/null || die "dpkg-deb --build failed"
mv -f "$DEB.tmp" "$DEB"
log "built $DEB (crilet $VERSION, $ARCH, Depends: $depends; from git $COMMIT)"
echo "$DEB"
