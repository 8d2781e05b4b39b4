#!/usr/bin/env bash
# hack/top-peer.sh — `kubectl top` and an HPA on the upstream kubelet's node and on crilet's
# (issue 37, part 2): the check of tests/top.rs, with the real metrics-server (hack/cluster.sh
# metrics-server), run on each node of the same control plane and containerd in turn, and the
# answers tabled side by side. What exactly runs: benches/cluster/top.rs (the cluster benchmark's
# `CRILET_BENCH_CLUSTER_CHECK=top`).
#
# Usage: hack/top-peer.sh [--out FILE]   (as root)
#   --out FILE   write the table to FILE (default: stdout only)
# QUIET MACHINE ONLY: the kubelet kills every running pod of the runtime it does not know, so it
# refuses to start while other pods run on this containerd (a test run leaves its last pods:
# hack/teardown.sh first). About 6 minutes once built. metrics-server is left running, dialling
# InternalIP (crilet's turn is the last).
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

WORK="$CRILET_DEV/bench"
mkdir -p "$WORK"

peer_nodes localhost crilet-bench

cd "$REPO_ROOT"
log "building: cargo bench --no-run --bench cluster"
cargo bench --no-run --bench cluster
CRILET_BENCH_CLUSTER_CHECK=top CRILET_BENCH_KUBELET_BIN="$K8S_BIN_DIR/kubelet" \
    CRILET_BENCH_MD="$WORK/top.md" cargo bench --bench cluster
if [ -n "$out" ]; then
    cp "$WORK/top.md" "$out"
    log "table written to $out"
fi
