#!/usr/bin/env bash
# hack/demo.sh — see crilet run the example pods on a private containerd, in one command.
#
# Usage: hack/demo.sh [-v]       (as root; rerunnable: a crilet it started before is replaced)
# Quiet by default: apt and cargo output go to /var/lib/crilet-dev/logs/setup.log; -v shows it.
# Runs hack/setup.sh, `cargo build --release`, renders examples/*.yaml (image placeholders
# filled in) into /var/lib/crilet-dev/demo-manifests, runs `crilet preflight` (stops on a FAIL),
# then starts
#   target/release/crilet run ... --control-socket /run/crilet-dev/crilet.sock
# in the background (pid /run/crilet-dev/crilet.pid, log /var/lib/crilet-dev/logs/crilet.log)
# and waits up to 120 s until `crilet get pods` shows every pod Running and Ready (else it says
# which pod is not, and why).
# Then: edit files in the manifest dir to see updates; stop everything with hack/teardown.sh.
# Env: CRILET_BIN=path uses that binary and skips the build; DEMO_TIMEOUT=seconds (120);
# DEMO_EXTRA_FLAGS more `crilet run` flags (hack/cluster-demo.sh passes the cluster ones).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

check_prerequisites
for arg in "$@"; do
    case "$arg" in
        -v | --verbose) CRILET_VERBOSE=1; export CRILET_VERBOSE ;;
        *) die "unknown argument: $arg (usage: $0 [-v])" ;;
    esac
done
TIMEOUT="${DEMO_TIMEOUT:-120}"
# A failed step leaves what setup started (containerd, the registry, maybe crilet) running on
# purpose, so it can be looked at; say how to stop it.
trap 'status=$?; [ "$status" = 0 ] || warn "the demo failed (exit $status); what it started keeps running: stop it with hack/teardown.sh"' EXIT

bash "$HACK_DIR/setup.sh"
set -a
# shellcheck disable=SC1090
. "$ENV_FILE"
set +a

if [ -n "${CRILET_BIN:-}" ]; then
    BIN="$CRILET_BIN"
else
    log "building crilet (release)"
    (cd "$REPO_ROOT" && quietly cargo build --release)
    BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/crilet"
fi
[ -x "$BIN" ] || die "no crilet binary at $BIN"

# ------------------------------------------------------------------------------------------
# Manifests: rendered next to the target directory, then renamed in one by one, so the
# watching agent never reads a half-written file. Files no longer in examples/ are removed
# (their pods are terminated, which is what a rerun after deleting an example should do).
render_manifests() {
    local stage="$DEMO_MANIFESTS.staging" f out var expr=()
    rm -rf "$stage"
    install -d -m 0755 "$stage" "$DEMO_MANIFESTS"
    chmod 0755 "$DEMO_MANIFESTS"
    # One sed expression per CRILET_IMAGE_* variable in the env file (no envsubst needed).
    for var in $(compgen -v CRILET_IMAGE_); do
        expr+=(-e "s|\${$var}|${!var}|g")
    done
    for f in "$REPO_ROOT"/examples/*.yaml; do
        out="$stage/$(basename "$f")"
        sed "${expr[@]}" "$f" >"$out"
        chmod 0644 "$out"
        # shellcheck disable=SC2016  # a literal ${CRILET_ is what we look for
        if grep -n '\${CRILET_' "$out" >&2; then die "unresolved placeholder in $f"; fi
    done
    for f in "$stage"/*.yaml; do
        cmp -s "$f" "$DEMO_MANIFESTS/$(basename "$f")" || mv -f "$f" "$DEMO_MANIFESTS/"
    done
    for f in "$DEMO_MANIFESTS"/*; do
        [ -e "$f" ] || continue
        [ -e "$REPO_ROOT/examples/$(basename "$f")" ] || rm -f "$f"
    done
    rm -rf "$stage"
}
render_manifests
EXPECTED="$(cat "$DEMO_MANIFESTS"/*.yaml | grep -c '^kind: Pod')"
log "rendered $EXPECTED pods into $DEMO_MANIFESTS"

# ------------------------------------------------------------------------------------------
# A crilet from an earlier run is replaced (the binary may have changed); its pods keep
# running and the new agent adopts them.
adopt "$CRILET_PIDFILE" crilet "$CRILET_SOCK" || true
stop_pid "$CRILET_PIDFILE" "$CRILET_SOCK" crilet 15
mkdir -p "$CRILET_ROOT_DIR" "$CRILET_POD_LOGS_DIR"
# /metrics and /healthz on loopback only (the kubelet's healthz port; CRILET_METRICS_ADDRESS
# moves it when something else listens there).
METRICS_ADDRESS="${CRILET_METRICS_ADDRESS:-127.0.0.1:10248}"
# One flag list for preflight and run, so preflight checks exactly what the agent will use.
CRILET_FLAGS=(
    --container-runtime-endpoint "$CRILET_CONTAINERD_ENDPOINT"
    --pod-manifest-path "$DEMO_MANIFESTS"
    --root-dir "$CRILET_ROOT_DIR"
    --pod-logs-dir "$CRILET_POD_LOGS_DIR"
    --container-logs-dir "$CRILET_DEV/containers-logs"
    --control-socket "$CRILET_SOCK"
    --metrics-bind-address "$METRICS_ADDRESS"
)
# hack/cluster-demo.sh joins this same agent to its control plane (--kubeconfig and the node
# flags, space-separated; paths without spaces).
# shellcheck disable=SC2206  # word splitting is the point
[ -z "${DEMO_EXTRA_FLAGS:-}" ] || CRILET_FLAGS+=($DEMO_EXTRA_FLAGS)
"$BIN" preflight "${CRILET_FLAGS[@]}" || die "crilet preflight failed: fix the FAIL lines above, then rerun"
start_daemon "$CRILET_PIDFILE" "$CRILET_LOG" "$BIN" run "${CRILET_FLAGS[@]}"
PID="$(cat "$CRILET_PIDFILE")"
log "crilet started (pid $PID), log $CRILET_LOG"

get_pods() { "$BIN" get pods -A --control-socket "$CRILET_SOCK"; }

# not_ready TABLE — the "namespace/name" of every pod row (after the NAMESPACE NAME READY
# STATUS ... header) that is not Running with all its containers ready; "(missing pods)" while
# fewer than the expected pods are listed. Empty output: all ready.
not_ready() {
    awk -v want="$EXPECTED" '
        NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "STATUS") st = i; if ($i == "READY") rd = i }; next }
        NF > 0  { rows++; split($rd, r, "/"); if ($st != "Running" || r[1] != r[2]) print $1 "/" $2 }
        END     { if (rows < want) print "(missing pods)" }' <<<"$1"
}

deadline=$((SECONDS + TIMEOUT))
table=""
while :; do
    if [ ! -d "/proc/$PID" ]; then
        tail -n 30 "$CRILET_LOG" >&2 || true
        die "crilet exited; see $CRILET_LOG"
    fi
    table="$(get_pods 2>/dev/null || true)"
    if [ -n "$table" ] && [ -z "$(not_ready "$table")" ]; then break; fi
    if [ "$SECONDS" -ge "$deadline" ]; then
        printf '%s\n' "$table"
        for pod in $(not_ready "$table"); do
            [ "$pod" = "(missing" ] || [ "$pod" = "pods)" ] && continue
            warn "$pod is not ready; its conditions, container states and events:"
            "$BIN" describe pod "${pod#*/}" -n "${pod%%/*}" --control-socket "$CRILET_SOCK" |
                sed -n '/^Conditions:/,$p' >&2 || true
        done
        die "not every pod is Ready after ${TIMEOUT}s: $(not_ready "$table" | tr '\n' ' ')(crilet left running; hack/teardown.sh stops it)"
    fi
    sleep 1
done

printf '\n%s\n\n' "$table"
cat <<EOF
crilet is running the demo pods (pid $PID), every one Ready.
To talk to this agent without repeating --control-socket:
  export CRILET_CONTROL_SOCKET=$CRILET_SOCK
  pods:      $BIN get pods -A -o wide
  logs:      $BIN logs sidecar-demo -c log-shipper
  manifests: $DEMO_MANIFESTS (edit web.yaml's image to $CRILET_IMAGE_WEB_V2 for an in-place update)
  health:    curl -s http://$METRICS_ADDRESS/healthz      metrics: curl -s http://$METRICS_ADDRESS/metrics
  agent log: $CRILET_LOG
Stop everything (agent, pods, containerd, registry): hack/teardown.sh
EOF
