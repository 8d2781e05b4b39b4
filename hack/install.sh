#!/usr/bin/env bash
# hack/install.sh — install crilet as a systemd service on this node.
#
# Usage: cargo build --release && hack/install.sh
#   installs target/release/crilet   -> /usr/local/bin/crilet (0755)
#            systemd/crilet.service  -> /etc/systemd/system/crilet.service (0644; ExecStart names
#                                       the installed binary)
#            systemd/kubeadm.conf    -> /usr/local/share/crilet/kubeadm.conf (0644; the drop-in
#                                       for a node that joins with kubeadm, not active until
#                                       copied: README "Joining with kubeadm")
#            systemd/config.yaml     -> /etc/crilet/config.yaml (0644; every setting commented
#                                       out at its default), ONLY if that file does not exist:
#                                       a config already there is never overwritten
#   creates  /etc/crilet/manifests (0755: crilet refuses group/other-writable manifest dirs)
#   then `systemctl daemon-reload && systemctl enable crilet.service` if systemd is PID 1,
#   otherwise prints those commands instead. It does not start the service.
# Env: CRILET_BIN=path (binary to install; default the release build),
#      DESTDIR=dir (stage under dir, e.g. for packaging; never calls systemctl),
#      CRILET_PREFIX=dir (default /usr/local: the binary goes to dir/bin, and the unit's
#      ExecStart says so) and CRILET_UNIT_DIR=dir (default /etc/systemd/system): hack/deb.sh
#      stages the Debian package with /usr and /lib/systemd/system.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

BIN="${CRILET_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/crilet}"
CONFIG="$REPO_ROOT/systemd/config.yaml"
DESTDIR="${DESTDIR:-}"
PREFIX="${CRILET_PREFIX:-/usr/local}"
UNIT_DIR="${CRILET_UNIT_DIR:-/etc/systemd/system}"

[ -x "$BIN" ] || die "no crilet binary at $BIN (run: cargo build --release)"
[ -n "$DESTDIR" ] || require_root

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
crilet_unit "$PREFIX/bin" "$tmp/crilet.service"
install -D -m 0755 "$BIN" "$DESTDIR$PREFIX/bin/crilet"
install -D -m 0644 "$tmp/crilet.service" "$DESTDIR$UNIT_DIR/crilet.service"
sed "s#^ExecStart=/usr/local/bin/crilet #ExecStart=$PREFIX/bin/crilet #" "$REPO_ROOT/systemd/kubeadm.conf" >"$tmp/kubeadm.conf"
grep -q "^ExecStart=$PREFIX/bin/crilet run " "$tmp/kubeadm.conf" || die "systemd/kubeadm.conf: no ExecStart=/usr/local/bin/crilet run to point at $PREFIX/bin"
install -D -m 0644 "$tmp/kubeadm.conf" "$DESTDIR$PREFIX/share/crilet/kubeadm.conf"
install -d -m 0755 "$DESTDIR/etc/crilet" "$DESTDIR/etc/crilet/manifests"
# install -d leaves an existing directory's mode alone; the agent would refuse a loose one.
chmod 0755 "$DESTDIR/etc/crilet" "$DESTDIR/etc/crilet/manifests"
log "installed $DESTDIR$PREFIX/bin/crilet, $DESTDIR$UNIT_DIR/crilet.service, $DESTDIR$PREFIX/share/crilet/kubeadm.conf, $DESTDIR/etc/crilet/manifests"
# The unit runs `crilet run --config /etc/crilet/config.yaml`: the file must exist, and it is
# the user's once it does (a symlink or anything else already there counts as existing).
if [ -e "$DESTDIR/etc/crilet/config.yaml" ] || [ -L "$DESTDIR/etc/crilet/config.yaml" ]; then
    log "kept $DESTDIR/etc/crilet/config.yaml (never overwritten; the defaults are in $CONFIG)"
else
    install -m 0644 "$CONFIG" "$DESTDIR/etc/crilet/config.yaml"
    log "installed $DESTDIR/etc/crilet/config.yaml (every setting commented out at its default)"
fi

if [ -z "$DESTDIR" ] && systemd_is_init; then
    systemctl daemon-reload
    systemctl enable crilet.service
    log "enabled crilet.service; start it with: systemctl start crilet"
else
    log "systemd is not PID 1 here (or DESTDIR is set), so not running; on a systemd node:"
    echo "    systemctl daemon-reload"
    echo "    systemctl enable crilet.service"
    echo "    systemctl start crilet    # when you want it running"
fi
