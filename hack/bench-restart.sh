#!/usr/bin/env bash
# hack/bench-restart.sh — restart benchmark (not a test): how fast crilet replaces an exited
# container, and how fast its status shows the replacement, as ratios against bare CRI calls
# measured in the same run (benches/restart.rs says exactly what is measured).
#
# Usage: hack/bench-restart.sh [--runtime 2.1|1.6] [--outage]      (as root)
#   --runtime R   measure on containerd R. Without it: the runtime the environment runs now.
#                 If R is not the active runtime, hack/setup.sh is run for R first.
#                 WARNING: switching runtimes stops the running containerd and tears down its
#                 pods, including those of tests or agents someone else runs on this machine
#                 right now. This script is for humans at a quiet machine; it does not switch
#                 back afterwards (run `CRILET_RUNTIME=2.1 bash hack/setup.sh` for that).
#   --outage      also measure after a runtime outage: containerd is stopped for 8 s and
#                 started again (hack/containerd.sh) while the benchmark's agent runs. Events
#                 mode only (2.1). Running containers survive, but anything else talking to
#                 containerd at that moment sees it go away.
# Environment:
#   CRILET_BENCH_RESTARTS   restarts per series (default 8)
# Output: the benchmark's progress on stderr, then its summary (also kept in
# /var/lib/crilet-dev/bench-restart.txt).
set -euo pipefail

want=""
outage=0
while [ $# -gt 0 ]; do
    case "$1" in
        --runtime) [ $# -ge 2 ] || { echo "--runtime needs 2.1 or 1.6" >&2; exit 2; }; want="$2"; shift 2 ;;
        --runtime=*) want="${1#--runtime=}"; shift ;;
        --outage) outage=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (usage: $0 [--runtime 2.1|1.6] [--outage])" >&2; exit 2 ;;
    esac
done
case "$want" in
    "" ) ;;
    2 | 2.*) want=2.1 ;;
    1.6 | 1.6.*) want=1.6 ;;
    *) echo "--runtime $want: expected 2.1 or 1.6" >&2; exit 2 ;;
esac

# lib.sh picks the runtime from CRILET_RUNTIME, else from the one the environment was set up
# with: unset it so that CRILET_RUNTIME below is the active runtime.
unset CRILET_RUNTIME
. "$(dirname "$0")/lib.sh"
require_root

active=""
if [ -s "$ENV_FILE" ] && [ -s "$RUNTIME_FILE" ] && containerd_answers; then
    active="$CRILET_RUNTIME"
fi
want="${want:-${active:-2.1}}"
if [ "$outage" = 1 ] && [ "$want" != 2.1 ]; then
    die "--outage measures events mode: it needs --runtime 2.1 (containerd 1.6 has no CRI events)"
fi

if [ "$active" != "$want" ]; then
    warn "the active runtime is '${active:-none}', not $want: running hack/setup.sh for $want."
    warn "This stops the running containerd and tears down its pods (also other people's tests)."
    CRILET_RUNTIME="$want" bash "$HACK_DIR/setup.sh"
else
    log "containerd $want is already the active runtime; not touching it"
fi

cd "$REPO_ROOT"
log "building (release profile): cargo bench --bench restart --no-run"
cargo bench --bench restart --no-run

REPORT="$CRILET_DEV/bench-restart.txt"
log "running the benchmark (runtime $want$([ "$outage" = 1 ] && echo ', with a containerd outage'))"
# CRILET_RUNTIME is not passed on: hack/containerd.sh (the outage) must act on the active runtime.
if ! env -u CRILET_RUNTIME CRILET_BENCH_OUTAGE="$outage" cargo bench --bench restart >"$REPORT.tmp"; then
    rm -f "$REPORT.tmp"
    die "the benchmark failed (see above; its cleanup says whether anything was left)"
fi
mv "$REPORT.tmp" "$REPORT"
echo
echo "=== restart benchmark summary (runtime $want; kept in $REPORT) ==="
cat "$REPORT"
