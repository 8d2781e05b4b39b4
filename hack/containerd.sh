#!/usr/bin/env bash
# hack/containerd.sh — start/stop/restart/status of crilet's PRIVATE containerd.
#
# Usage: hack/containerd.sh start|stop|restart|status
#   start    start it (no-op if already running); waits until its socket answers
#   stop     SIGTERM by pid file, wait up to 20 s, then SIGKILL; containers keep running
#   restart  stop + start (running containers survive: their shims are never signalled)
#   status   print pid and version; exit 0 if running, 3 if not
# The config is written by hack/setup.sh (run that first on a fresh machine).
# Socket: /run/crilet-dev/containerd/containerd.sock, log: /var/lib/crilet-dev/logs/containerd.log
# (CRILET_RUNTIME=2.3: the containerd beside the environment, socket
# /run/crilet-dev/containerd-2.3/containerd.sock, log containerd-2.3.log; see hack/lib.sh.)
# The system containerd (if any) is never touched.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

start() {
    require_root
    [ -f "$CONTAINERD_CONFIG" ] || die "no $CONTAINERD_CONFIG; run hack/setup.sh first"
    local pid
    if adopt "$CONTAINERD_PIDFILE" containerd "$CONTAINERD_CONFIG"; then
        pid="$(containerd_pid)"
        wait_for 30 "containerd (pid $pid) to answer" containerd_answers ||
            die "containerd (pid $pid) runs but does not answer on $CONTAINERD_SOCK"
        log "containerd already running (pid $pid)"
        return 0
    fi
    mkdir -p "$(dirname "$CONTAINERD_SOCK")" "$CONTAINERD_ROOT" "$CONTAINERD_STATE" "$RUNC_ROOT" "$LOG_DIR"
    # The runtime's own directory comes first on PATH: containerd starts its shim from PATH
    # and would otherwise pick up the system's (1.6) shim. runc is found further down.
    [ -x "$CONTAINERD_BIN_DIR/containerd" ] ||
        die "no containerd at $CONTAINERD_BIN_DIR (runtime $CRILET_RUNTIME); run hack/setup.sh first"
    PATH="$CONTAINERD_BIN_DIR:$PATH" start_daemon "$CONTAINERD_PIDFILE" "$CONTAINERD_LOG" \
        "$CONTAINERD_BIN_DIR/containerd" --config "$CONTAINERD_CONFIG"
    pid="$(cat "$CONTAINERD_PIDFILE")"
    if ! wait_for 60 "containerd to answer on $CONTAINERD_SOCK" containerd_answers; then
        tail -n 30 "$CONTAINERD_LOG" >&2 || true
        die "containerd (pid $pid) did not come up"
    fi
    log "containerd started (pid $pid) on $CONTAINERD_SOCK"
}

stop() {
    require_root
    adopt "$CONTAINERD_PIDFILE" containerd "$CONTAINERD_CONFIG" || true
    # containerd shuts down cleanly on SIGTERM and leaves the shims (and so every container)
    # running; the next containerd reconnects to them.
    stop_pid "$CONTAINERD_PIDFILE" "$CONTAINERD_CONFIG" containerd 20
}

status() {
    local pid
    adopt "$CONTAINERD_PIDFILE" containerd "$CONTAINERD_CONFIG" 2>/dev/null || true
    if pid="$(containerd_pid)"; then
        if containerd_answers; then
            echo "containerd running (pid $pid), $(ctrd version 2>/dev/null | awk '/Version:/ {print $2; exit}') on $CONTAINERD_SOCK"
            return 0
        fi
        echo "containerd process $pid exists but does not answer on $CONTAINERD_SOCK"
        return 1
    fi
    echo "containerd (crilet-dev) is not running"
    return 3
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    restart) stop; start ;;
    status) status ;;
    *) echo "usage: $0 start|stop|restart|status" >&2; exit 2 ;;
esac
