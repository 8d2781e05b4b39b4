#!/usr/bin/env bash
# hack/bench.sh — crilet's benchmarks (not tests) in one command: crilet against raw-CRI
# baselines measured in the same run (alternating samples), written to BENCHMARKS.md at the
# repository root. What each scenario measures, exactly: benches/node/*.rs and benches/restart.rs.
#
# Usage: hack/bench.sh [--only SCENARIO[,SCENARIO...]] [--start-method inside|outside|both]
#                      [--no-relist] [--out FILE]   (as root)
#   Scenarios, in the order they run (default: all but the two -outside ones):
#     start-seq       pod start, 20 pods one at a time, raw vs crilet          (cargo bench --bench node)
#     start-seq-outside   the same, measured from outside (see --start-method)  (node)
#     start-burst     pod start, 20 at once, 5 rounds                          (node)
#     start-burst-outside the same, measured from outside                       (node)
#     scale           110 pods with sidecars and 220 exec probes: start, Ready, RSS and CPU  (node)
#     terminate       termination accuracy against the grace deadline         (node)
#     restart         exit -> replacement started, events mode (containerd 2.1)  (cargo bench --bench restart)
#     restart-relist  the same in relist mode (containerd 1.6)                 (restart)
#   --only LIST   run only these scenarios (comma-separated)
#   --start-method inside|outside|both   how the pod start scenarios measure (default inside):
#                 inside  the project's own way: start-seq sees "running" as the arrival of the
#                         runtime's CONTAINER_STARTED_EVENT on the benchmark's CRI event stream,
#                         start-burst as the first ListContainers of a 50 ms poll showing it; the
#                         baseline's image is resolved once, untimed
#                 outside an outside reviewer's way (issue 33), scenarios start-seq-outside and
#                         start-burst-outside instead: both sides seen by ListContainers every 5 ms
#                         (CRILET_BENCH_OUTSIDE_POLL_MS), the baseline also asking ImageStatus for
#                         each container before creating it (as crilet does for IfNotPresent)
#                 both    each start scenario both ways, the two side by side in the report
#                 (applies to the start scenarios selected, by default or by --only)
#   --no-relist   never switch runtimes: skip restart-relist
#   --out FILE    write the report to FILE instead of BENCHMARKS.md
#   --cluster     run beside the control plane of hack/cluster.sh (started if it is not up), each
#                 agent of the node scenarios joined to it as node bench-node, so its static pods
#                 have mirror pods and its Node a status, as on a cluster's node. The baselines
#                 run beside the same control plane (the kubelet peer of scale does not run).
#   --no-kubelet  scale without its peer, the upstream kubelet (standalone, static pods, on the
#                 same containerd; built once by `hack/cluster.sh build kubelet`, ~1 min with a
#                 warm Go module cache, several on a cold machine)
# The environment of hack/setup.sh is set up (containerd 2.1) if it is not up.
# restart-relist switches the environment to containerd 1.6 (CRILET_RUNTIME=1.6 hack/setup.sh),
# runs the restart benchmark there and switches back to 2.1 afterwards, also on failure or
# Ctrl-C. WARNING: a runtime switch stops the running containerd and tears down its pods,
# including those of tests someone else runs on this machine right now: run the full thing on
# a quiet machine, and use --no-relist otherwise. The default run takes about 30 minutes on 2
# cores.
# Environment: the benchmarks' knobs pass through, e.g. CRILET_BENCH_SEQ_PODS,
#   CRILET_BENCH_BURST_PODS, CRILET_BENCH_BURST_ROUNDS, CRILET_BENCH_OUTSIDE_POLL_MS [5], CRILET_BENCH_SCALE_PODS,
#   CRILET_BENCH_SCALE_WINDOW, CRILET_BENCH_SCALE_PROBES, CRILET_BENCH_TERM_RUNS, CRILET_BENCH_TERM_GRACE (benches/node/main.rs),
#   CRILET_BENCH_AGENT_ARGS (more flags for the agent, set by --cluster)
#   and CRILET_BENCH_RESTARTS (benches/restart.rs).
# Output: progress on stderr; the report; each benchmark's own output kept in
# /var/lib/crilet-dev/bench/.
set -euo pipefail

ALL=(start-seq start-burst scale terminate restart restart-relist)
OUTSIDE=(start-seq-outside start-burst-outside)
NODE_SCENARIOS=(start-seq start-seq-outside start-burst start-burst-outside scale terminate)
only=""
start_method=inside
relist=1
out=""
cluster=0
peer=1
while [ $# -gt 0 ]; do
    case "$1" in
        --only) [ $# -ge 2 ] || { echo "--only needs a list of scenarios" >&2; exit 2; }; only="$2"; shift 2 ;;
        --only=*) only="${1#--only=}"; shift ;;
        --start-method) [ $# -ge 2 ] || { echo "--start-method needs inside, outside or both" >&2; exit 2; }; start_method="$2"; shift 2 ;;
        --start-method=*) start_method="${1#--start-method=}"; shift ;;
        --no-relist) relist=0; shift ;;
        --cluster) cluster=1; shift ;;
        --no-kubelet) peer=0; shift ;;
        --out) [ $# -ge 2 ] || { echo "--out needs a file" >&2; exit 2; }; out="$2"; shift 2 ;;
        --out=*) out="${1#--out=}"; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (see $0 --help)" >&2; exit 2 ;;
    esac
done

# lib.sh picks the runtime from CRILET_RUNTIME, else from the one the environment was set up
# with: unset it so that CRILET_RUNTIME below is the active runtime.
unset CRILET_RUNTIME
. "$(dirname "$0")/lib.sh"
require_root

wanted=()
if [ -n "$only" ]; then
    IFS=, read -r -a wanted <<<"$only"
    for s in "${wanted[@]}"; do
        case " ${ALL[*]} ${OUTSIDE[*]} " in *" $s "*) ;; *) die "unknown scenario '$s' (known: ${ALL[*]} ${OUTSIDE[*]})" ;; esac
    done
else
    wanted=("${ALL[@]}")
fi
# start_methods METHOD SCENARIO... — the scenarios with each start scenario measured as METHOD
# says (inside: as named; outside: its -outside twin instead; both: the two), once each.
start_methods() {
    local method="$1" s t
    shift
    local -a out=() twins
    for s in "$@"; do
        twins=("$s")
        case "$s" in
            start-seq | start-burst)
                case "$method" in
                    outside) twins=("$s-outside") ;;
                    both) twins=("$s" "$s-outside") ;;
                esac
                ;;
        esac
        for t in "${twins[@]}"; do
            case " ${out[*]} " in *" $t "*) ;; *) out+=("$t") ;; esac
        done
    done
    echo "${out[*]}"
}
case "$start_method" in
    inside | outside | both) read -r -a wanted <<<"$(start_methods "$start_method" "${wanted[@]}")" ;;
    *) die "--start-method: '$start_method' is not inside, outside or both" ;;
esac
want() {
    local s
    for s in "${wanted[@]}"; do [ "$s" = "$1" ] && return 0; done
    return 1
}
if [ "$relist" = 0 ] && want restart-relist; then
    if [ -n "$only" ]; then
        die "--no-relist and --only restart-relist contradict each other"
    fi
    log "--no-relist: skipping restart-relist (it needs a runtime switch)"
    kept=()
    for s in "${wanted[@]}"; do [ "$s" = restart-relist ] || kept+=("$s"); done
    wanted=("${kept[@]}")
fi

REPORT="${out:-$REPO_ROOT/BENCHMARKS.md}"
WORK="$CRILET_DEV/bench"
mkdir -p "$WORK"
rm -f "$WORK"/node.json "$WORK"/node.md "$WORK"/restart-*.txt

active=""
if [ -s "$ENV_FILE" ] && [ -s "$RUNTIME_FILE" ]; then
    # Set up, maybe restarting right now (a test may restart it): give it a moment first.
    wait_for 30 "containerd to answer" containerd_answers && active="$CRILET_RUNTIME"
fi
if [ -z "$active" ]; then
    log "the environment is not up: running hack/setup.sh (containerd 2.1)"
    CRILET_RUNTIME=2.1 bash "$HACK_DIR/setup.sh"
elif [ "$active" != 2.1 ]; then
    [ "$relist" = 1 ] || die "the active runtime is $active; these benchmarks run on 2.1 and --no-relist forbids switching (CRILET_RUNTIME=2.1 hack/setup.sh)"
    warn "the active runtime is $active: switching to 2.1 (this tears down the running pods)"
    CRILET_RUNTIME=2.1 bash "$HACK_DIR/setup.sh"
fi
# setup.sh installs jq; an environment set up by hand may lack it.
command -v jq >/dev/null || die "jq is needed to write the report (apt-get install jq)"
env_value() { sed -n "s/^$1=//p" "$ENV_FILE"; }
RUNTIME_21="containerd $(env_value CRILET_RUNTIME_VERSION)"

cd "$REPO_ROOT"
# The agent measured is the binary users ship (`cargo build --release`, whole-program LTO); the
# harnesses themselves are built with the bench profile, which skips LTO to build faster. Both
# profiles write target/release/crilet (building a bench builds the package's binary too), so
# the release binary is copied aside before the harnesses are built.
if [ -z "${CRILET_BENCH_BIN:-}" ]; then
    log "building the agent (release profile): cargo build --release --bin crilet"
    cargo build --release --bin crilet
    mkdir -p "$WORK"
    cp "${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/crilet" "$WORK/crilet-release"
    export CRILET_BENCH_BIN="$WORK/crilet-release"
fi
log "agent under test: $CRILET_BENCH_BIN"
log "building the harnesses (bench profile): cargo bench --no-run --bench node --bench restart"
cargo bench --no-run --bench node --bench restart

# The peer of scale: the upstream kubelet, built from its Go module (cached outside the repo).
# It kills every running pod it does not know, so it runs only on a node with nothing else on it;
# joined to a control plane (--cluster) crilet is not comparable with a standalone kubelet.
if want scale && [ "$peer" = 1 ] && [ "$cluster" = 0 ]; then
    log "building the upstream kubelet (the peer of scale): hack/cluster.sh build kubelet"
    bash "$HACK_DIR/cluster.sh" build kubelet
    export CRILET_BENCH_KUBELET_BIN="$K8S_BIN_DIR/kubelet"
else
    unset CRILET_BENCH_KUBELET_BIN
fi

beside=""
if [ "$cluster" = 1 ]; then
    log "--cluster: the control plane of hack/cluster.sh beside, the agents joined as node bench-node"
    bash "$HACK_DIR/cluster.sh" up
    bash "$HACK_DIR/cluster.sh" node bench-node >"$WORK/bench-node.env"
    # The static pods' namespace, so that their mirror pods can be made (as on a real node,
    # where a missing namespace leaves a static pod without its mirror).
    (
        . "$CLUSTER_ENV_FILE"
        kc() { "$CRILET_KUBECTL" --kubeconfig "$CRILET_CLUSTER_KUBECONFIG" --cache-dir "$CRILET_KUBECTL_CACHE_DIR" "$@"; }
        kc get namespace bench-node >/dev/null 2>&1 || kc create namespace bench-node >/dev/null
    )
    node_var() { sed -n "s/^$1=//p" "$WORK/bench-node.env"; }
    # Port 10391 on 127.0.0.1 for the agent's kubelet API (the tests' agents use others).
    export CRILET_BENCH_AGENT_ARGS="--kubeconfig $(node_var CRILET_NODE_KUBECONFIG) --node-ip 127.0.0.1 \
--port 10391 --tls-cert-file $(node_var CRILET_NODE_TLS_CERT) --tls-private-key-file $(node_var CRILET_NODE_TLS_KEY) \
--client-ca-file $(node_var CRILET_CLUSTER_CA)"
    beside="the control plane of hack/cluster.sh (Kubernetes $(sed -n 's/^CRILET_CLUSTER_VERSION=//p' "$CLUSTER_ENV_FILE")), crilet joined to it as node bench-node (\`--cluster\`)"
fi

failed=()
node_list=()
for s in "${NODE_SCENARIOS[@]}"; do want "$s" && node_list+=("$s"); done
started_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
t_start=$SECONDS

if [ "${#node_list[@]}" -gt 0 ]; then
    log "node benchmark: ${node_list[*]}"
    if ! CRILET_BENCH_JSON="$WORK/node.json" cargo bench --bench node -- "${node_list[@]}" >"$WORK/node.md"; then
        failed+=("node benchmark (${node_list[*]})")
    fi
fi

if want restart; then
    log "restart benchmark, events mode (containerd 2.1)"
    env -u CRILET_RUNTIME cargo bench --bench restart >"$WORK/restart-2.1.txt" || failed+=(restart)
fi

RUNTIME_16=""
switched=0
switch_back() {
    if [ "$switched" = 1 ]; then
        switched=0
        log "switching the environment back to containerd 2.1"
        CRILET_RUNTIME=2.1 bash "$HACK_DIR/setup.sh" || warn "switching back to 2.1 failed: run CRILET_RUNTIME=2.1 hack/setup.sh"
    fi
}
if want restart-relist; then
    trap 'switch_back' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    warn "switching the environment to containerd 1.6 for restart-relist (tears down running pods)"
    switched=1
    if CRILET_RUNTIME=1.6 bash "$HACK_DIR/setup.sh"; then
        RUNTIME_16="containerd $(env_value CRILET_RUNTIME_VERSION)"
        log "restart benchmark, relist mode ($RUNTIME_16)"
        env -u CRILET_RUNTIME cargo bench --bench restart >"$WORK/restart-1.6.txt" || failed+=(restart-relist)
    else
        failed+=("restart-relist (setup of containerd 1.6)")
    fi
    switch_back
fi
elapsed=$((SECONDS - t_start))

# ---------------------------------------------------------------------------------------------
# The report.

# restart_rows FILE TARGET_KIND — markdown rows from the restart benchmark's first table
# ("before any outage"); rows are "LABEL(46 columns) median p90 ratio".
restart_rows() {
    awk -v kind="$2" '
        function trim(s) { sub(/^ +/, "", s); sub(/ +$/, "", s); return s }
        /^after the outage/ { exit }
        {
            label = trim(substr($0, 1, 46)); n = split(substr($0, 47), f, " ")
            if (n < 2 || f[1] !~ /^[0-9.]+$/) next
            v[label] = f[1]; p[label] = f[2]; r[label] = (n >= 3 ? f[3] : "")
        }
        END {
            if (!("raw CRI" in v) || !("crilet" in v)) { print "| (no results: the benchmark failed) | | | | | |"; exit }
            ratio = v["crilet"] / v["raw CRI"]
            # Step 5 targets: with events at most 1.2x the raw sequence; in relist mode at most
            # the relist period (1 s) plus 1.5x the raw sequence.
            if (kind == "events") { target = "≤ 1.2×"; met = (ratio <= 1.2) }
            else { target = "≤ 1000 ms (relist period) + 1.5× baseline"; met = (v["crilet"] <= 1000 + 1.5 * v["raw CRI"]) }
            printf "| exit → replacement started | %s / %s ms | %s / %s ms | %.2f× | %s | %s |\n", \
                v["raw CRI"], p["raw CRI"], v["crilet"], p["crilet"], ratio, target, (met ? "met" : "**not met**")
            s = "crilet, status polled (series 3)"
            if (s in v) printf "| exit → replacement started, crilet status polled meanwhile | — | %s / %s ms | %.2f× | — | — |\n", v[s], p[s], v[s] / v["raw CRI"]
            s = "restartCount 1 + new containerID"
            if (s in v) printf "| new instance started → crilet status shows it | — | %s / %s ms | — | — | — |\n", v[s], p[s]
            s = "... and state running"
            if (s in v) printf "| … and shows it running | — | %s / %s ms | — | — | — |\n", v[s], p[s]
        }' "$1"
}

restart_section() {
    local file="$1" kind="$2" title="$3"
    echo
    echo "### $title"
    echo
    echo "A container that exits 1 after ~1 s, restartPolicy Always; per restart: the new instance's CRI" \
        "started_at − the old one's finished_at. Baseline: bare CRI calls that detect the exit as fast as the" \
        "runtime allows ($([ "$kind" = events ] && echo 'CONTAINER_STOPPED_EVENT' || echo 'ContainerStatus every 10 ms')) and" \
        "create + start the replacement at once. Series interleaved; values median / p90" \
        "(benches/restart.rs, \`cargo bench --bench restart\`)."
    echo
    if [ ! -s "$file" ]; then
        echo "Not run or failed; see the script's output."
        return
    fi
    echo "| metric | baseline (raw CRI) | crilet | ratio | target | met |"
    echo "| --- | --- | --- | --- | --- | --- |"
    restart_rows "$file" "$kind"
    echo
    grep -E '^(runtime:|baseline exit detection:|crilet mode)' "$file" | sed 's/^/- /'
}

# jq: a number with two decimals (1.1 -> "1.10").
JQ_DEFS='def two: (. * 100 | round) as $r | "\($r / 100 | floor).\($r % 100 | if . < 10 then "0\(.)" else "\(.)" end)";'

node_section() {
    local id="$1"
    [ -s "$WORK/node.json" ] || { echo; echo "### $id"; echo; echo "Not run or failed; see the script's output."; return; }
    jq -r --arg id "$id" "$JQ_DEFS"'
        def cell: if . == null or . == "" then "—" else (tostring | gsub("\\|"; "\\|")) end;
        .scenarios[] | select(.id == $id)
        | "\n### \(.title)\n\n\(.how)\n\n| metric | baseline (raw CRI) | crilet | ratio | target | met |\n| --- | --- | --- | --- | --- | --- |\n"
          + ([.rows[] | "| \(.metric | cell) | \(.baseline | cell) | \(.crilet | cell) | \(if .ratio == null then "—" else "\(.ratio | two)×" end) | \(.target | cell) | \(if .met == null then "—" elif .met then "met" else "**not met**" end) |"] | join("\n"))
          + ([.notes[] | "\n\n" + .] | join(""))' "$WORK/node.json"
}

# both_ways SCENARIO — SCENARIO's rows beside those of SCENARIO-outside (the same rows, in the
# same order), when both ran.
both_ways() {
    [ -s "$WORK/node.json" ] || return 0
    jq -r --arg a "$1" --arg b "$1-outside" "$JQ_DEFS"'
        def cell: if . == null or . == "" then "—" else (tostring | gsub("\\|"; "\\|")) end;
        def ratio: if .ratio == null then "—" else "\(.ratio | two)×" end;
        (.scenarios | map(select(.id == $a)) | first) as $in
        | (.scenarios | map(select(.id == $b)) | first) as $out
        | if $in == null or $out == null then empty else
            range(0; [($in.rows | length), ($out.rows | length)] | min) as $i
            | $in.rows[$i] as $x | $out.rows[$i] as $y
            | "| `\($a)` | \($x.metric | cell) | \($x.baseline | cell) | \($x.crilet | cell) | \($x | ratio) | \($y.baseline | cell) | \($y.crilet | cell) | \($y | ratio) |"
          end' "$WORK/node.json"
}

# What each way of measuring a pod start includes (issue 33): printed under the start scenarios;
# a run of both ways first gets their rows side by side.
start_methods_notes() {
    echo
    echo "### Pod start, measured two ways: what each includes"
    local rows
    rows="$(both_ways start-seq; both_ways start-burst)"
    if [ -n "$rows" ]; then
        echo
        echo "The start scenarios run both ways in this run (\`--start-method both\`), each way's rows side by side;"
        echo "the two ways ran one after the other, not alternating with each other, so compare their ratios."
        echo
        echo "| scenario | metric | inside: baseline | inside: crilet | inside: ratio | outside: baseline | outside: crilet | outside: ratio |"
        echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
        echo "$rows"
    fi
    cat <<'NOTES'

"Inside" is this benchmark's own way (scenarios start-seq, start-burst); "outside" is the way an
outside reviewer measured (issue 33; scenarios start-seq-outside, start-burst-outside,
`hack/bench.sh --start-method outside|both`). Both ways keep the same t0s, the same pods and the
same alternation of raw and crilet samples; they differ in what the baseline does and in how
"running" is seen.

- t0, both ways. Baseline: just before its first step (the pod's log directory, then
  RunPodSandbox); the pod's configs are built before t0. crilet: just before the first rename of a
  staged manifest into its directory. So crilet's t0..running also holds what no baseline does:
  noticing the renamed file, reading and parsing the manifest, its PodSandboxStatus after
  RunPodSandbox (for the pod IPs), its ImageStatus (asked beside RunPodSandbox), and its own
  scheduling on a busy machine.
- The baseline. Inside: RunPodSandbox → CreateContainer → StartContainer, the image resolved once
  before anything is timed. Outside: the same with ImageStatus of the container's image after
  RunPodSandbox and before CreateContainer, timed. crilet asks ImageStatus beside RunPodSandbox,
  where it is hidden as long as it answers first; the baseline's is on its critical path: by
  itself it makes the outside baseline slower, i.e. the outside ratio smaller, not larger.
- "Running", inside. One at a time: the arrival of the runtime's CONTAINER_STARTED_EVENT on the
  benchmark's own CRI event stream: no poll, nothing rounded, no extra load (on a runtime without
  the stream, a 5 ms ListContainers poll instead). 20 at once: the first ListContainers (state running) of a
  50 ms poll that shows the container; each start is ended up to 50 ms (plus the list's own
  latency) after the container runs, about half a period on average for either side: a delay
  added to both sides pulls a ratio toward 1.
- "Running", outside. One poll for both sides, ListContainers (state running) every 5 ms: a start
  ends at most 5 ms (plus the list's latency) late, but containerd answers a list of every
  running container on the node every 5 ms while it starts the pods. Both sides pay that load;
  crilet's side also has the agent's process wanting the same CPUs at the same time, so the load
  need not cost both sides the same.
- Why the two ways can give different ratios: a one-pod start is short, so a few milliseconds
  of observation delay or of containerd load are a few percent of it; the 50 ms poll adds its
  rounding to both sides of the burst while the 5 ms poll adds load instead; and the outside
  baseline's ImageStatus moves the baseline the other way. Which of these dominates on a
  machine is what a run with `--start-method both` shows; this note gives no numbers.
NOTES
}

# The targets at a glance: every row that has one.
summary_rows() {
    if [ -s "$WORK/node.json" ]; then
        jq -r "$JQ_DEFS"'.scenarios[] | .title as $t | .rows[] | select(.met != null)
            | "| \($t) | \(.metric) | \(.crilet)\(if .ratio == null then "" else " (\(.ratio | two)× baseline)" end) | \(.target) | \(if .met then "met" else "**not met**" end) |"' \
            "$WORK/node.json"
    fi
    local f kind
    for f in "$WORK/restart-2.1.txt" "$WORK/restart-1.6.txt"; do
        [ -s "$f" ] || continue
        case "$f" in *2.1*) kind=events ;; *) kind=relist ;; esac
        restart_rows "$f" "$kind" | head -1 | sed "s/^| /| Exit → replacement ($kind mode) | /; s/ | \([^|]*\) | \([^|]*\) | \([^|]*\) | \([^|]*\) | \([^|]*\) |$/ | \2 (\3) | \4 | \5 |/"
    done
}

cpu_model="$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
mem_gib="$(awk '/^MemTotal:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)"
commit="$(git -C "$REPO_ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git -C "$REPO_ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit (with uncommitted changes)"
fi
{
    echo "# crilet benchmarks"
    echo
    echo "Written by \`hack/bench.sh\` ($(date -u +%Y-%m-%d), run started $started_at, took $((elapsed / 60)) min $((elapsed % 60)) s)."
    echo "Every number is crilet against a baseline measured in the same run on the same machine, samples"
    echo "alternating; absolute times depend on the machine, the ratios are the result. Nothing else ran"
    echo "on purpose, but the machine was not isolated: treat single-digit-percent differences as noise."
    echo
    echo "- Machine: ${cpu_model:-unknown CPU}, $(nproc) cores, $mem_gib GiB memory, Linux $(uname -r)"
    echo "- Runtimes: $RUNTIME_21 (events)${RUNTIME_16:+; $RUNTIME_16 (relist, restart-relist only)}"
    echo "- crilet: $(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO_ROOT/Cargo.toml" | head -1), commit $commit, release build"
    if [ -s "$WORK/node.json" ]; then
        echo "- Pods seen running (only through CRI), $(jq -r .observed_by "$WORK/node.json")"
    fi
    echo "- Scenarios run: ${wanted[*]}"
    if [ -n "${CRILET_BENCH_KUBELET_BIN:-}" ]; then
        echo "- The peer of scale: the upstream kubelet $K8S_VERSION (built from the k8s.io/kubernetes module), standalone on the same containerd"
    fi
    if [ -n "$beside" ]; then
        echo "- Beside, on the same machine: $beside"
    fi
    if [ "${#failed[@]}" -gt 0 ]; then
        echo "- **Failed:** ${failed[*]} (see the script's output)"
    fi
    echo
    echo "## Targets"
    echo
    echo "| scenario | metric | crilet | target | met |"
    echo "| --- | --- | --- | --- | --- |"
    summary_rows
    echo
    echo "## Scenarios"
    want start-seq && node_section start-seq
    want start-seq-outside && node_section start-seq-outside
    want start-burst && node_section start-burst
    want start-burst-outside && node_section start-burst-outside
    if want start-seq || want start-seq-outside || want start-burst || want start-burst-outside; then
        start_methods_notes
    fi
    want restart && restart_section "$WORK/restart-2.1.txt" events "Exit → replacement started, events mode (${RUNTIME_21})"
    want restart-relist && restart_section "$WORK/restart-1.6.txt" relist "Exit → replacement started, relist mode (${RUNTIME_16:-containerd 1.6})"
    want scale && node_section scale
    want terminate && node_section terminate
    echo
    echo "Reproduce: \`hack/bench.sh\` as root (\`--help\` for options)."
} >"$REPORT.tmp"
# hack/bench-cluster.sh's section (from its marker line to the end) is kept as it was.
if [ -f "$REPORT" ] && grep -qxF "<!-- hack/bench-cluster.sh -->" "$REPORT"; then
    { echo; sed -n '/^<!-- hack\/bench-cluster\.sh -->$/,$p' "$REPORT"; } >>"$REPORT.tmp"
fi
mv "$REPORT.tmp" "$REPORT"
log "report written to $REPORT (the benchmarks' own output is in $WORK)"
if [ "${#failed[@]}" -gt 0 ]; then
    die "failed: ${failed[*]}"
fi
