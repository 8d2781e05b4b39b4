#!/usr/bin/env bash
# hack/bench-probes.sh — probe benchmark (not a test): what 100 probes with period 1 s cost the
# agent, and how accurately they keep their period, as ratios against 1 probe in the same run.
#
# Usage: hack/bench-probes.sh            (as root; the test environment must be up: hack/setup.sh)
# Environment:
#   BENCH_SECONDS   measurement window per phase (default 30)
#   BENCH_PODS      pods in the load phase (default 5); each has 10 containers with a readiness
#                   and a liveness probe, so 5 pods = 100 probes
#   BENCH_TYPES     probe handlers to measure, in turn (default "tcp exec")
#   CRILET_BIN      the agent binary (default: target/release/crilet, built if missing)
#
# How: one agent of its own (own manifest dir, root dir and control socket). Every probe run
# leaves a timestamp (the container's clock, from adjtimex: seconds and microseconds) in a file
# on a hostPath volume: an exec probe appends it itself; a tcp probe connects to a port where
# the container runs a busybox `nc -ll -e` listener that appends it on each connection.
# For each type: phase 1 is one pod with one readiness probe (the baseline), phase 2 the load
# pods. In each phase, once every container is ready, the agent's CPU time (utime+stime from
# /proc/PID/stat) and the machine's idle time (/proc/stat) are read at the start and the end of
# the window, and the intervals between consecutive runs of each probe inside the window give
# the period accuracy. Prints one table per type; removes its pods and stops its agent (by PID)
# on exit, also on failure or interrupt.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

require_root
[ -s "$ENV_FILE" ] || die "$ENV_FILE missing: run hack/setup.sh first"

WINDOW="${BENCH_SECONDS:-30}"
PODS="${BENCH_PODS:-5}"
TYPES="${BENCH_TYPES:-tcp exec}"
CONTAINERS=10
NS=bench-probes
BENCH_DIR="$CRILET_DEV/bench-probes"
MANIFESTS="$BENCH_DIR/manifests"
OUT="$BENCH_DIR/out"
SOCK="$CRILET_RUN/bench-probes.sock"
AGENT_LOG="$BENCH_DIR/crilet.log"
IMAGE="$(sed -n 's/^CRILET_IMAGE_BUSYBOX=//p' "$ENV_FILE")"
ENDPOINT="$(sed -n 's/^CRILET_CONTAINERD_ENDPOINT=//p' "$ENV_FILE")"

if [ -z "${CRILET_BIN:-}" ]; then
    CRILET_BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/crilet"
    if [ ! -x "$CRILET_BIN" ]; then
        log "building the release binary"
        (cd "$REPO_ROOT" && cargo build --release --bin crilet)
    fi
fi
[ -x "$CRILET_BIN" ] || die "no agent binary at $CRILET_BIN"

cli() { "$CRILET_BIN" "$@" --control-socket "$SOCK"; }
pods_json() { cli get pods -A -o json 2>/dev/null; }
no_pods() { [ "$(pods_json | jq '.items | length')" = 0 ]; }
all_ready() { [ "$(pods_json | jq '[.items[].status.containerStatuses[]? | select(.ready)] | length')" = "$1" ]; }

AGENT_PID=""
cleanup() {
    local status=$?
    set +e
    if [ -n "$AGENT_PID" ] && [ -d "/proc/$AGENT_PID" ]; then
        if ls "$MANIFESTS"/*.yaml >/dev/null 2>&1; then
            rm -f "$MANIFESTS"/*.yaml
            log "removing the benchmark pods"
            wait_for 120 "the benchmark pods to be removed" no_pods || warn "pods left behind; see $AGENT_LOG"
        fi
        kill -TERM "$AGENT_PID" 2>/dev/null
        wait "$AGENT_PID" 2>/dev/null
    elif [ -n "$AGENT_PID" ] && ls "$MANIFESTS"/*.yaml >/dev/null 2>&1; then
        warn "the agent died; its pods (namespace $NS) may be left behind; see $AGENT_LOG"
    fi
    rm -rf "$OUT" "$MANIFESTS"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -S "$SOCK" ] && "$CRILET_BIN" version --control-socket "$SOCK" >/dev/null 2>&1; then
    die "an agent already answers on $SOCK (another benchmark running?)"
fi
rm -rf "$BENCH_DIR"
mkdir -p "$MANIFESTS" "$BENCH_DIR/root" "$BENCH_DIR/pod-logs" "$OUT"
chmod 0755 "$BENCH_DIR" "$MANIFESTS"

# In a session of its own, so that a Ctrl-C of this script does not reach the agent: the
# cleanup needs it to remove the pods.
setsid "$CRILET_BIN" run --container-runtime-endpoint "$ENDPOINT" \
    --pod-manifest-path "$MANIFESTS" --root-dir "$BENCH_DIR/root" \
    --pod-logs-dir "$BENCH_DIR/pod-logs" --container-logs-dir "" --control-socket "$SOCK" \
    --node-name crilet-bench-node 2>"$AGENT_LOG" &
AGENT_PID=$!
wait_for 30 "the agent to answer" pods_json || die "agent did not start; see $AGENT_LOG"
log "agent pid $AGENT_PID ($CRILET_BIN)"

# probe_yaml KIND TYPE FILE PORT — a probe with period 1 s whose every run appends a timestamp
# to /out/FILE (exec: the probe command; tcp: the listener on PORT, see pod_yaml).
probe_yaml() {
    local handler
    case "$2" in
        exec) handler="exec: {command: [sh, -c, 'adjtimex | grep tv_ >> /out/$3']}" ;;
        tcp) handler="tcpSocket: {port: $4}" ;;
        *) die "unknown probe type $2 (exec or tcp)" ;;
    esac
    cat <<EOF
    $1:
      $handler
      periodSeconds: 1
      timeoutSeconds: 5
      failureThreshold: 1000
EOF
}

# pod_yaml NAME TYPE CONTAINERS KINDS... — a pod whose containers each carry the given probes.
pod_yaml() {
    local name="$1" type="$2" n="$3"; shift 3
    mkdir -p "$OUT/$name"
    cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name, namespace: $NS}
spec:
  terminationGracePeriodSeconds: 2
  volumes: [{name: out, hostPath: {path: $OUT/$name, type: Directory}}]
  containers:
EOF
    local i k kind listeners
    for ((i = 0; i < n; i++)); do
        listeners=""
        if [ "$type" = tcp ]; then
            k=0
            for kind in "$@"; do
                # A persistent listener that runs the stamp script on each connection.
                listeners+="printf '#!/bin/sh\\nadjtimex | grep tv_ >> /out/c$i-$kind\\n' > /tmp/$kind; "
                listeners+="chmod +x /tmp/$kind; nc -ll -p $((9000 + i * 4 + k)) -e /tmp/$kind & "
                k=$((k + 1))
            done
        fi
        cat <<EOF
  - name: c$i
    image: $IMAGE
    command:
    - sh
    - -c
    - |
      ${listeners}trap "exit 0" TERM; while true; do sleep 1; done
    volumeMounts: [{name: out, mountPath: /out}]
EOF
        k=0
        for kind in "$@"; do
            probe_yaml "$kind" "$type" "c$i-$kind" $((9000 + i * 4 + k))
            k=$((k + 1))
        done
    done
}

cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$AGENT_PID/stat"; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$AGENT_PID/status"; }

# measure NAME PROBES DIRS... — one window; sets RESULT to "probes cpu_ms rss_kib runs idle% mean
# p50 p99 max" (times in ms) for the probe files under DIRS. (Everything runs in the main shell,
# no command substitution around the waits, so a Ctrl-C goes straight to the cleanup.)
measure() {
    local name="$1" probes="$2"; shift 2
    local t0 t1 c0 c1 s0 s1 tck
    tck="$(getconf CLK_TCK)"
    t0="$(date +%s%6N)"; c0="$(cpu_ticks)"; s0="$(head -1 /proc/stat)"
    # `wait` (unlike a foreground `sleep`) returns at once when a trapped signal arrives.
    sleep "$WINDOW" &
    wait $!
    t1="$(date +%s%6N)"; c1="$(cpu_ticks)"; s1="$(head -1 /proc/stat)"
    local rss idle
    rss="$(rss_kib)"
    idle="$(printf '%s\n%s\n' "$s0" "$s1" | awk '
        { t = 0; for (i = 2; i <= NF; i++) t += $i; tot[NR] = t; id[NR] = $5 + $6 }
        END { d = tot[2] - tot[1]; printf "%.1f\n", (d > 0 ? 100 * (id[2] - id[1]) / d : 0) }')"
    local ivals="$BENCH_DIR/$name.intervals" runs=0 f files
    : >"$ivals"
    mapfile -t files < <(find "$@" -type f)
    for f in "${files[@]}"; do
        awk -v t0="$t0" -v t1="$t1" '
            /tv_sec/  { s = $2 }
            /tv_usec/ { t = s * 1000000 + $2
                        if (t >= t0 && t <= t1) { if (prev != "") print t - prev; prev = t } }
        ' "$f" >>"$ivals"
        runs=$((runs + $(awk -v t0="$t0" -v t1="$t1" '
            /tv_sec/ { s = $2 } /tv_usec/ { t = s * 1000000 + $2; if (t >= t0 && t <= t1) n++ }
            END { print n + 0 }' "$f")))
    done
    local stats
    stats="$(awk '{ d = $1 - 1000000; if (d < 0) d = -d; print $1, d }' "$ivals" | sort -k2,2n | awk '
        { dv[NR] = $2; sum += $1 }
        END {
            if (NR == 0) { print "0 0 0 0"; exit }
            p50 = dv[int((NR - 1) * 0.50) + 1]; p99 = dv[int((NR - 1) * 0.99) + 1]
            printf "%.1f %.1f %.1f %.1f\n", sum / NR / 1000, p50 / 1000, p99 / 1000, dv[NR] / 1000
        }')"
    RESULT="$probes $(((c1 - c0) * 1000 / tck)) $rss $runs $idle $stats"
}

# run_type TYPE — the baseline and the load phase for one probe type; appends its table to REPORT.
run_type() {
    local type="$1"
    log "[$type] phase 1: 1 pod, 1 container, 1 readiness probe (period 1 s)"
    pod_yaml "$type-base" "$type" 1 readinessProbe >"$MANIFESTS/.base.tmp"
    mv "$MANIFESTS/.base.tmp" "$MANIFESTS/$type-base.yaml"
    wait_for 90 "the baseline pod to be ready" all_ready 1 || die "baseline pod not ready; see $AGENT_LOG"
    sleep 2
    log "[$type] measuring ${WINDOW}s"
    measure "$type-base" 1 "$OUT/$type-base"
    local base="$RESULT"
    rm -f "$MANIFESTS/$type-base.yaml"
    wait_for 60 "the baseline pod to be removed" no_pods || die "baseline pod not removed"

    local total=$((PODS * CONTAINERS * 2)) dirs=() p
    log "[$type] phase 2: $PODS pods x $CONTAINERS containers x (readiness + liveness) = $total probes"
    for ((p = 0; p < PODS; p++)); do
        pod_yaml "$type-load-$p" "$type" "$CONTAINERS" readinessProbe livenessProbe >"$MANIFESTS/.load.tmp"
        mv "$MANIFESTS/.load.tmp" "$MANIFESTS/$type-load-$p.yaml"
        dirs+=("$OUT/$type-load-$p")
    done
    wait_for 180 "the load pods to be ready" all_ready $((PODS * CONTAINERS)) \
        || die "load pods not ready; see $AGENT_LOG"
    sleep 3
    log "[$type] measuring ${WINDOW}s"
    measure "$type-load" "$total" "${dirs[@]}"
    local load="$RESULT"
    local restarts; restarts="$(pods_json | jq '[.items[].status.containerStatuses[]?.restartCount] | add')"
    rm -f "$MANIFESTS/$type"-load-*.yaml
    wait_for 120 "the load pods to be removed" no_pods || die "load pods not removed"

    local b_n b_cpu b_rss b_runs b_idle b_mean b_p50 b_p99 b_max
    local l_n l_cpu l_rss l_runs l_idle l_mean l_p50 l_p99 l_max
    read -r b_n b_cpu b_rss b_runs b_idle b_mean b_p50 b_p99 b_max <<<"$base"
    read -r l_n l_cpu l_rss l_runs l_idle l_mean l_p50 l_p99 l_max <<<"$load"
    awk -v w="$WINDOW" -v type="$type" -v restarts="${restarts:-?}" >>"$REPORT" \
        -v bn="$b_n" -v bc="$b_cpu" -v br="$b_rss" -v bu="$b_runs" -v bi="$b_idle" \
        -v bm="$b_mean" -v b5="$b_p50" -v b9="$b_p99" -v bx="$b_max" \
        -v ln="$l_n" -v lc="$l_cpu" -v lr="$l_rss" -v lu="$l_runs" -v li="$l_idle" \
        -v lm="$l_mean" -v l5="$l_p50" -v l9="$l_p99" -v lx="$l_max" '
        function row(name, b, l, fmt) {
            printf "%-32s %12" fmt " %12" fmt " %9s\n", name, b, l, (b > 0 ? sprintf("%.2fx", l / b) : "-")
        }
        BEGIN {
            printf "\n%s probes, period 1 s, %d s window per phase\n", type, w
            printf "%-32s %12s %12s %9s\n", "", bn " probe", ln " probes", "ratio"
            row("probe runs per second", bu / w, lu / w, ".2f")
            row("probe runs / expected", bu / (w * bn), lu / (w * ln), ".3f")
            row("agent CPU (ms per s)", bc / w, lc / w, ".1f")
            row("agent CPU per probe run (ms)", (bu ? bc / bu : 0), (lu ? lc / lu : 0), ".3f")
            row("agent RSS (MiB)", br / 1024, lr / 1024, ".1f")
            row("machine CPU idle (%)", bi, li, ".0f")
            row("interval mean (ms)", bm, lm, ".1f")
            row("|interval - 1 s| p50 (ms)", b5, l5, ".1f")
            row("|interval - 1 s| p99 (ms)", b9, l9, ".1f")
            row("|interval - 1 s| max (ms)", bx, lx, ".1f")
            printf "container restarts during the load phase: %s (expected 0)\n", restarts
        }'
}

REPORT="$BENCH_DIR/report.txt"
: >"$REPORT"
for type in $TYPES; do
    run_type "$type"
done
cat "$REPORT"
