#!/usr/bin/env bash
# hack/verify-unit.sh — check systemd/crilet.service with systemd-analyze and our contract.
#
# Usage: hack/verify-unit.sh [UNIT]     (default: systemd/crilet.service; exit 0 = good; the
#        unit as hack/install.sh or the Debian package installs it is checked the same way)
# Works without systemd as PID 1. systemd-analyze verify insists that ExecStart's binary
# exists, so a temporary copy whose ExecStart is /bin/true (same arguments) is verified;
# any warning it prints counts as a failure (it exits 0 on many of them). Then the
# directives crilet relies on are checked literally: Type=notify, KillMode=process (stopping
# the agent never kills containers), Restart=on-failure, NotifyAccess=main, the containerd
# ordering, and the install target.
# Needs the `systemd` package (for systemd-analyze; installed here if missing).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

UNIT="${1:-$REPO_ROOT/systemd/crilet.service}"
[ -f "$UNIT" ] || die "no unit file at $UNIT"
if ! command -v systemd-analyze >/dev/null; then
    require_root
    log "installing systemd (for systemd-analyze)"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q systemd
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
name="$(basename "$UNIT")"
sed -E 's#^ExecStart=(-?)/usr(/local)?/bin/crilet( |$)#ExecStart=\1/bin/true\3#' "$UNIT" >"$tmp/$name"
grep -q '^ExecStart=/bin/true run' "$tmp/$name" || die "ExecStart is not /usr/local/bin/crilet run ... (or /usr/bin/crilet)"

fail=0
if ! out="$(systemd-analyze verify --man=no "$tmp/$name" 2>&1)"; then
    fail=1
fi
if [ -n "$out" ]; then
    printf '%s\n' "$out" | sed "s|$tmp/||g" >&2
    fail=1
fi

# want KEY=VALUE — the unit sets exactly this (last assignment wins in systemd, so check it).
want() {
    local key="${1%%=*}" got
    got="$(grep -E "^$key=" "$UNIT" | tail -n1 || true)"
    if [ "$got" != "$1" ]; then
        echo "$name: expected '$1', found '${got:-nothing}'" >&2
        fail=1
    fi
}
want Type=notify
want NotifyAccess=main
want KillMode=process
want Restart=on-failure
want RestartSec=2
want Delegate=no
want After=containerd.service
want Wants=containerd.service
want WantedBy=multi-user.target
grep -qE '^LimitNOFILE=[0-9]+$' "$UNIT" || { echo "$name: LimitNOFILE missing" >&2; fail=1; }

if [ "$fail" = 0 ]; then
    echo "$name: OK (systemd-analyze verify clean, contract directives present)"
fi
exit "$fail"
