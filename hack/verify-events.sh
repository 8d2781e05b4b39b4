#!/usr/bin/env bash
# hack/verify-events.sh — check crilet's CRI event-stream path against containerd 1.7.
#
# Usage: hack/verify-events.sh   (as root; not part of hack/test.sh: it swaps the runtime)
# containerd 1.6 (Debian bookworm) has no CRI GetContainerEvents, so the test suite only
# exercises the 1 s relist. This script fetches Debian trixie's containerd 1.7 .deb with
# `apt-get download` (unpacked, never installed), restarts the crilet-dev environment on it,
# runs a crash-looping pod under a debug build of crilet, and checks that the agent follows
# the event stream and restarts the container within a fraction of a second of its exit.
# Afterwards the environment is torn down and set up again on the system containerd 1.6.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
require_root

CACHE="$CRILET_DEV/containerd-1.7"
WORK="$CRILET_DEV/verify-events"
BIN="$REPO_ROOT/target/debug/crilet"

fetch_containerd_17() {
    [ -x "$CACHE/usr/bin/containerd" ] && return 0
    log "fetching containerd 1.7 from Debian trixie (apt-get download)"
    local apt="$CACHE.apt"
    mkdir -p "$apt/lists/partial" "$apt/archives/partial"
    echo "deb http://deb.debian.org/debian trixie main" >"$apt/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache::Archives=$apt/archives")
    apt-get "${opts[@]}" update -q >/dev/null
    (cd "$apt" && apt-get "${opts[@]}" download -q containerd >/dev/null 2>&1)
    dpkg-deb -x "$apt"/containerd_*.deb "$CACHE"
}

restore() {
    local status=$?
    [ -n "${AGENT_PID:-}" ] && kill "$AGENT_PID" 2>/dev/null || true
    bash "$HACK_DIR/teardown.sh" >/dev/null 2>&1 || warn "teardown failed"
    bash "$HACK_DIR/setup.sh" >/dev/null 2>&1 || warn "setup on containerd 1.6 failed"
    exit "$status"
}

fetch_containerd_17
(cd "$REPO_ROOT" && cargo build -q)
bash "$HACK_DIR/teardown.sh" >/dev/null
trap restore EXIT
CRILET_CONTAINERD_BIN_DIR="$CACHE/usr/bin" bash "$HACK_DIR/setup.sh" >/dev/null
set -a; . "$ENV_FILE"; set +a
version="$(ctrd version | awk '/Version:/ {v=$2} END {print v}')"
case "$version" in 1.7*) log "containerd $version is running" ;; *) die "expected containerd 1.7, got $version" ;; esac

rm -rf "$WORK"
mkdir -p "$WORK/manifests"
chmod 755 "$WORK/manifests"
cat >"$WORK/manifests/crash.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata: {name: crash, namespace: verify-events}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: $CRILET_IMAGE_BUSYBOX
    command: [sh, -c, 'sleep 2; exit 1']
YAML
chmod 644 "$WORK/manifests/crash.yaml"
RUST_LOG=info,crilet::pleg=debug "$BIN" run --container-runtime-endpoint "$CRILET_CONTAINERD_ENDPOINT" \
    --pod-manifest-path "$WORK/manifests" --root-dir "$WORK/root" --pod-logs-dir "$WORK/logs" \
    --container-logs-dir "" --control-socket "$WORK/crilet.sock" >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
# First exit restarts at once (no back-off entry yet): wait for two starts.
wait_for 30 "two starts of the crash-looping container" \
    bash -c "[ \"\$(grep -c 'Started container main' '$WORK/agent.log')\" -ge 2 ]" ||
    die "the container was not restarted; agent log: $WORK/agent.log"
grep -q "following the runtime's CRI event stream" "$WORK/agent.log" ||
    die "the agent did not follow the CRI event stream; agent log: $WORK/agent.log"
grep -q "CRI event uid=" "$WORK/agent.log" || die "no CRI event reached a pod worker"
log "ok: crilet follows containerd $version's CRI event stream and restarts on its events"
