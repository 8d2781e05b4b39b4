#!/usr/bin/env bash
# hack/bench-resize.sh — in-place resize benchmark (not a test): how fast an edit of a static
# pod's memory limit reaches the container's cgroup, as a ratio against a bare CRI
# UpdateContainerResources call measured in the same run (benches/resize.rs says exactly what
# is measured).
#
# Usage: hack/bench-resize.sh      (as root)
#   Runs on the runtime the environment runs now (hack/setup.sh); it never touches containerd.
# Environment:
#   CRILET_BENCH_RESIZES   resizes per series (default 10)
# Output: the benchmark's progress on stderr, then its summary (also kept in
# /var/lib/crilet-dev/bench-resize.txt).
set -euo pipefail

case "${1:-}" in
    "") ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (usage: $0)" >&2; exit 2 ;;
esac

. "$(dirname "$0")/lib.sh"
require_root

[ -s "$ENV_FILE" ] || die "$ENV_FILE is missing: run hack/setup.sh first"

cd "$REPO_ROOT"
# The dev profile: a release build takes far longer than the benchmark; the ratio is what counts.
log "building (dev profile): cargo bench --profile dev --bench resize --no-run"
cargo bench --profile dev --bench resize --no-run

REPORT="$CRILET_DEV/bench-resize.txt"
log "running the benchmark"
if ! cargo bench --profile dev --bench resize >"$REPORT.tmp"; then
    rm -f "$REPORT.tmp"
    die "the benchmark failed (see above; its cleanup says whether anything was left)"
fi
mv "$REPORT.tmp" "$REPORT"
echo
echo "=== resize benchmark summary (kept in $REPORT) ==="
cat "$REPORT"
