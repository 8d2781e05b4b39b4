#!/usr/bin/env bash
# hack/bench-cluster.sh — crilet against the upstream kubelet, side by side: each the node of the
# same control plane (hack/cluster.sh) on the same containerd, phases alternating kubelet, crilet,
# kubelet, crilet; everything observed from outside the agents (a pod watch, CRI timestamps, the
# API server's audit log, /proc). What exactly is measured: benches/cluster/*.rs.
#
# Usage: hack/bench-cluster.sh [--out FILE]   (as root)
#   --out FILE   write the section to FILE instead of BENCHMARKS.md (where it replaces the part
#                from the line "<!-- hack/bench-cluster.sh -->" up to "<!-- hack/bench-kruise.sh -->")
# Sets up what is missing: the containerd 2.1 environment (hack/setup.sh), the control plane and
# the upstream kubelet (hack/cluster.sh; the kubelet is built once, ~1 min after the control
# plane), the node identities `localhost` (the kubelet) and `crilet-bench`.
# QUIET MACHINE ONLY: the kubelet kills every running pod of the runtime it does not know, so the
# benchmark refuses to start while other pods run on this containerd.
# Environment: CRILET_BENCH_CLUSTER_ROUNDS [2], CRILET_BENCH_CLUSTER_STARTS [10],
#   CRILET_BENCH_CLUSTER_RESTARTS [5], CRILET_BENCH_CLUSTER_PODS [110],
#   CRILET_BENCH_CLUSTER_WINDOW [60 s], CRILET_BENCH_BIN (another crilet build).
# About 6 minutes per phase on 2 cores (25 min for the default 2 rounds), the last of them a
# window in which the agent's stats endpoints are scraped every 10 s (their cost at 110 pods). The agents' logs are
# kept in /var/lib/crilet-dev/bench-cluster while it runs; the output in /var/lib/crilet-dev/bench.
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

MARKER="<!-- hack/bench-cluster.sh -->"
REPORT="${out:-$REPO_ROOT/BENCHMARKS.md}"
WORK="$CRILET_DEV/bench"
mkdir -p "$WORK"

peer_nodes localhost crilet-bench

cd "$REPO_ROOT"
log "building (release profile): cargo bench --no-run --bench cluster"
cargo bench --no-run --bench cluster
started_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
t0=$SECONDS
CRILET_BENCH_KUBELET_BIN="$K8S_BIN_DIR/kubelet" CRILET_BENCH_MD="$WORK/cluster.md" \
    cargo bench --bench cluster
elapsed=$((SECONDS - t0))

commit="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit (with uncommitted changes)"
runtime="containerd $(sed -n 's/^CRILET_RUNTIME_VERSION=//p' "$ENV_FILE")"
section="$WORK/cluster-section.md"
{
    echo "$MARKER"
    echo
    echo "## Cluster mode: crilet against the upstream kubelet"
    echo
    echo "Written by \`hack/bench-cluster.sh\` ($(date -u +%Y-%m-%d), run started $started_at, took $((elapsed / 60)) min $((elapsed % 60)) s)."
    echo "Target: crilet at or below the kubelet on every row (ratio ≤ 1.00×)."
    echo
    echo "- Machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores, Linux $(uname -r)"
    echo "- Control plane and kubelet: Kubernetes $K8S_VERSION (built from the k8s.io/kubernetes module); runtime: $runtime"
    echo "- crilet: commit $commit, release build"
    cat "$WORK/cluster.md"
    echo
    echo "Reproduce: \`hack/bench-cluster.sh\` as root, on a quiet machine."
} >"$section"
if [ -f "$REPORT" ] && grep -qxF "$MARKER" "$REPORT"; then
    sed "/^$(printf '%s' "$MARKER" | sed 's/[^^]/[&]/g; s/\^/\\^/g')\$/,\$d" "$REPORT" >"$REPORT.tmp"
elif [ -f "$REPORT" ]; then
    { cat "$REPORT"; echo; } >"$REPORT.tmp"
else
    : >"$REPORT.tmp"
fi
cat "$section" >>"$REPORT.tmp"
# hack/bench-kruise.sh's section comes after this one: keep it.
if [ -f "$REPORT" ] && grep -qxF "<!-- hack/bench-kruise.sh -->" "$REPORT"; then
    { echo; sed -n '/^<!-- hack\/bench-kruise\.sh -->$/,$p' "$REPORT"; } >>"$REPORT.tmp"
fi
mv "$REPORT.tmp" "$REPORT"
log "report written to $REPORT"
