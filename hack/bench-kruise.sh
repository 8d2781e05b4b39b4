#!/usr/bin/env bash
# hack/bench-kruise.sh — OpenKruise's CloneSet in-place rollout on a crilet node and on an upstream
# kubelet node, side by side: the same control plane (hack/cluster.sh), kruise-manager
# (hack/kruise.sh), a kruise-daemon for the node under test and the same containerd; phases
# alternate kubelet, crilet, kubelet, crilet. Two rollouts per phase: to an image already on the
# node, and to one the node must pull from a registry that answers every request after a delay.
# What exactly is measured: benches/kruise/main.rs.
#
# Usage: hack/bench-kruise.sh [--out FILE]   (as root)
#   --out FILE   write the section to FILE instead of BENCHMARKS.md (where it replaces the part
#                from the line "<!-- hack/bench-kruise.sh -->" up to "<!-- hack/bench-resize.sh -->")
# Sets up what is missing: the containerd 2.1 environment (hack/setup.sh, which also writes the
# slow registry's hosts.toml), the control plane and the upstream kubelet (hack/cluster.sh),
# Kruise (hack/kruise.sh), the node identities `localhost` (the kubelet) and `crilet-bench`.
# QUIET MACHINE ONLY: the kubelet kills every running pod of the runtime it does not know, so the
# benchmark refuses to start while other pods run on this containerd.
# Environment: CRILET_BENCH_KRUISE_ROUNDS [2], CRILET_BENCH_KRUISE_DELAY_MS [3000],
#   CRILET_BENCH_CLUSTER_ONLY (kubelet|crilet), CRILET_BENCH_BIN (another crilet build).
# About 2 minutes per phase on 2 cores.
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

MARKER="<!-- hack/bench-kruise.sh -->"
REPORT="${out:-$REPO_ROOT/BENCHMARKS.md}"
WORK="$CRILET_DEV/bench"
mkdir -p "$WORK"

# setup.sh is idempotent; it also writes the slow registry's hosts.toml on an older environment.
CRILET_RUNTIME=2.1 bash "$HACK_DIR/setup.sh"
bash "$HACK_DIR/cluster.sh" build kubelet
bash "$HACK_DIR/cluster.sh"
bash "$HACK_DIR/kruise.sh"
bash "$HACK_DIR/cluster.sh" node localhost >/dev/null
bash "$HACK_DIR/cluster.sh" node crilet-bench >/dev/null

cd "$REPO_ROOT"
log "building (release profile): cargo bench --no-run --bench kruise"
cargo bench --no-run --bench kruise
started_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
t0=$SECONDS
CRILET_BENCH_KUBELET_BIN="$K8S_BIN_DIR/kubelet" CRILET_BENCH_MD="$WORK/kruise.md" \
    cargo bench --bench kruise
elapsed=$((SECONDS - t0))

commit="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit (with uncommitted changes)"
runtime="containerd $(sed -n 's/^CRILET_RUNTIME_VERSION=//p' "$ENV_FILE")"
section="$WORK/kruise-section.md"
{
    echo "$MARKER"
    echo
    echo "## OpenKruise in-place rollout: crilet against the upstream kubelet"
    echo
    echo "Written by \`hack/bench-kruise.sh\` ($(date -u +%Y-%m-%d), run started $started_at, took $((elapsed / 60)) min $((elapsed % 60)) s)."
    echo "Target: crilet at or below the kubelet (ratio ≤ 1.00×); no failed request on either."
    echo
    echo "- Machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores, Linux $(uname -r)"
    echo "- Control plane and kubelet: Kubernetes $K8S_VERSION (built from the k8s.io/kubernetes module); OpenKruise $KRUISE_VERSION; runtime: $runtime"
    echo "- crilet: commit $commit, release build"
    cat "$WORK/kruise.md"
    echo
    echo "Reproduce: \`hack/bench-kruise.sh\` as root, on a quiet machine."
} >"$section"
if [ -f "$REPORT" ] && grep -qxF "$MARKER" "$REPORT"; then
    sed "/^$(printf '%s' "$MARKER" | sed 's/[^^]/[&]/g; s/\^/\\^/g')\$/,\$d" "$REPORT" >"$REPORT.tmp"
elif [ -f "$REPORT" ]; then
    { cat "$REPORT"; echo; } >"$REPORT.tmp"
else
    : >"$REPORT.tmp"
fi
cat "$section" >>"$REPORT.tmp"
# The in-place resize section (written by hand from hack/bench-resize.sh) comes after this one:
# keep it.
if [ -f "$REPORT" ] && grep -qxF "<!-- hack/bench-resize.sh -->" "$REPORT"; then
    { echo; sed -n '/^<!-- hack\/bench-resize\.sh -->$/,$p' "$REPORT"; } >>"$REPORT.tmp"
fi
mv "$REPORT.tmp" "$REPORT"
log "report written to $REPORT"
