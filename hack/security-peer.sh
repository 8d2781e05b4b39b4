#!/usr/bin/env bash
# hack/security-peer.sh — the restricted namespace's side-by-side check (issue 36, part 7): a
# Deployment admitted under `pod-security.kubernetes.io/enforce: restricted` runs on the upstream
# kubelet's node, then on crilet's, each the node of the same control plane (hack/cluster.sh) on
# the same containerd; its container reports from /proc what it got (seccomp mode, no_new_privs,
# capability sets, uid/gid, root mount) and the two reports are tabled side by side. What exactly
# runs: benches/cluster/security.rs (the cluster benchmark's `CRILET_BENCH_CLUSTER_CHECK=security`).
#
# Usage: hack/security-peer.sh [--out FILE]   (as root)
#   --out FILE   write the table to FILE instead of docs/security.md (where it replaces the part
#                from the line "<!-- hack/security-peer.sh -->" to the end)
# QUIET MACHINE ONLY: the kubelet kills every running pod of the runtime it does not know, so it
# refuses to start while other pods run on this containerd (a test run leaves its last pods:
# hack/teardown.sh first). About 1 minute once built.
set -euo pipefail
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || { echo "--out needs a file" >&2; exit 2; }; out="$2"; shift 2 ;;
        --out=*) out="${1#--out=}"; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (see $0 --help)" >&2; exit 2 ;;
    esac
done
unset CRILET_RUNTIME
. "$(dirname "$0")/lib.sh"
require_root

MARKER="<!-- hack/security-peer.sh -->"
REPORT="${out:-$REPO_ROOT/docs/security.md}"
WORK="$CRILET_DEV/bench"
mkdir -p "$WORK"

peer_nodes localhost crilet-bench

cd "$REPO_ROOT"
log "building: cargo bench --no-run --bench cluster"
cargo bench --no-run --bench cluster
CRILET_BENCH_CLUSTER_CHECK=security CRILET_BENCH_KUBELET_BIN="$K8S_BIN_DIR/kubelet" \
    CRILET_BENCH_MD="$WORK/security.md" cargo bench --bench cluster

commit="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit (with uncommitted changes)"
runtime="containerd $(sed -n 's/^CRILET_RUNTIME_VERSION=//p' "$ENV_FILE")"
{
    if [ -f "$REPORT" ] && grep -qxF "$MARKER" "$REPORT"; then
        sed "/^$(printf '%s' "$MARKER" | sed 's/[^^]/[&]/g; s/\^/\\^/g')\$/,\$d" "$REPORT"
    elif [ -f "$REPORT" ]; then
        cat "$REPORT"
        echo
    fi
    echo "$MARKER"
    echo
    echo "Written by \`hack/security-peer.sh\` on $(date -u +%Y-%m-%d): Kubernetes $K8S_VERSION (control plane and"
    echo "kubelet), $runtime, Linux $(uname -r), crilet commit $commit. The Deployment of"
    echo "\`tests/restricted.rs\` (runAsNonRoot, runAsUser 1000, runAsGroup 3000, seccomp RuntimeDefault,"
    echo "allowPrivilegeEscalation false, capabilities drop ALL, readOnlyRootFilesystem, an emptyDir at"
    echo "/scratch) in a namespace enforcing \`restricted\`, once on each node:"
    echo
    cat "$WORK/security.md"
} >"$REPORT.tmp"
mv "$REPORT.tmp" "$REPORT"
log "table written to $REPORT"
