#!/usr/bin/env bash
# hack/kruise.sh — OpenKruise v1.8.2 (kruise-manager, kruise-daemon) on hack/cluster.sh's control plane.
#
# Usage: hack/kruise.sh [up [NODE...]]  build what is missing, install Kruise's CRDs, namespaces and
#                                      webhook configurations, start kruise-manager, and a
#                                      kruise-daemon for each NODE named (idempotent)
#        hack/kruise.sh daemon NODE     start (or keep) the kruise-daemon serving crilet node NODE;
#                                      prints its pid file, log and address
#        hack/kruise.sh daemon-stop NODE  stop that daemon (by pid file)
#        hack/kruise.sh down            remove the webhook configurations, stop every daemon and
#                                      the manager (by pid file), remove their runtime state
#        hack/kruise.sh build           build kruise-manager and kruise-daemon only
#        hack/kruise.sh status          what runs and answers (exit 1 unless the manager does)
#   -v / CRILET_VERBOSE=1: show the build's output as it comes.
#
# What `up` makes (as root; every step is skipped when already done):
#   1. kruise-manager and kruise-daemon built from the github.com/openkruise/kruise Go module,
#      pinned at v1.8.2, through a generated wrapper module outside the repo (it requires the
#      module and copies its go.mod's whole `replace (...)` block, with k8s.io/cri-api moved
#      from v0.30.10, which the proxy does not serve, to v0.30.14), CGO off, into
#      /var/lib/crilet-dev/kruise/v1.8.2/bin; Go's caches in /var/lib/crilet-dev/kruise/go
#      (log: $LOG_DIR/kruise-build.log). A stamp next to the binaries says what built them; a
#      second run builds nothing. No Kruise source is copied into the repository. One change:
#      kruise-manager's webhook server binds 0.0.0.0 (a literal in its main.go), so its main
#      package is built from a copy of that file made at build time in the wrapper module,
#      outside the repo, that binds 127.0.0.1 and differs in nothing else (prepare_manager_main).
#   2. the CRDs of the module zip's config/crd/bases (server-side apply: some are too big for
#      a client-side apply), the namespaces kruise-system and kruise-daemon-config, and
#      config/webhook rendered by `kubectl kustomize` (the chart's namespace and object
#      selectors) with the two configurations named as the manager looks them up
#      (kruise-mutating-webhook-configuration, kruise-validating-webhook-configuration);
#      created only when missing, because the manager rewrites them (URL, caBundle).
#   3. kruise-manager as a process beside the control plane, with the admin kubeconfig:
#      WEBHOOK_HOST=127.0.0.1 (the manager then points the webhooks at
#      https://127.0.0.1:$KRUISE_WEBHOOK_PORT with its own certificates), metrics and health
#      on 127.0.0.1 only, no leader election, no pprof, feature gate ImagePullJobGate on. `up`
#      waits for /readyz and for the
#      webhooks to carry the manager's URL and CA.
#   4. kruise-daemon per crilet node: NODE_NAME=NODE, the admin kubeconfig, health/metrics on a
#      free 127.0.0.1 port of 16300-16399, CRI at our containerd. The daemon looks for the CRI
#      socket under the fixed path /hostvarrun (its chart mounts the host's /var/run there):
#      /hostvarrun is made a symlink to /run/crilet-dev/containerd (only if nothing else is
#      there; `down` removes it).
# Why processes and not pods: kruise-manager must serve its webhooks to the API server on
# 127.0.0.1 and kruise-daemon must reach the API server on 127.0.0.1; as pods both would need
# hostNetwork, a hostPath'd kubeconfig and locally built images, and the tests start one crilet
# node each, with a daemon each. Nothing listens or dials anywhere but 127.0.0.1.
# Only processes recorded in our pid files (running our private binaries) are ever signalled.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

KRUISE_MODULE=github.com/openkruise/kruise
# The one replace of Kruise's go.mod that must change: the proxy does not serve v0.30.10.
KRUISE_CRI_API_VERSION=v0.30.14
KRUISE_BIN_DIR="$KRUISE_DIR/$KRUISE_VERSION/bin"
KRUISE_WRAPPER_DIR="$KRUISE_DIR/$KRUISE_VERSION/wrapper"
KRUISE_GOENV=(GOPATH="$KRUISE_DIR/go" GOCACHE="$KRUISE_DIR/go/cache" GOMODCACHE="$KRUISE_DIR/go/mod"
    GOTOOLCHAIN=local GOFLAGS="-buildvcs=false" CGO_ENABLED=0)
KRUISE_STATE="$KRUISE_DIR/state"
KRUISE_WEBHOOK_CERT_DIR="$KRUISE_STATE/webhook-certs"
KRUISE_LOCK="$CRILET_RUN/kruise.lock"
BUILD_LOG="$LOG_DIR/kruise-build.log"
HOSTVARRUN_TARGET="$(dirname "$CONTAINERD_SOCK")"
START_DEADLINE=120
# Kruise's defaults, plus ImagePullJob (alpha, off by default; the chart's featureGates value
# turns it on the same way). Pre-download before in-place updates stays off: crilet pulls the
# new image itself before it stops the old container.
KRUISE_FEATURE_GATES=ImagePullJobGate=true

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }

# ------------------------------------------------------------------------------------------
# Building
# ------------------------------------------------------------------------------------------
kruise_go() { env "${KRUISE_GOENV[@]}" nice -n 10 go "$@"; }

# What a build is made of: a binary whose stamp differs is rebuilt.
build_stamp() { echo "$KRUISE_MODULE $KRUISE_VERSION cri-api=$KRUISE_CRI_API_VERSION webhook-bind=127.0.0.1 $(go env GOVERSION 2>/dev/null)"; }
kruise_built() {
    [ -x "$KRUISE_BIN_DIR/$1" ] && [ "$(cat "$KRUISE_BIN_DIR/$1.stamp" 2>/dev/null)" = "$(build_stamp)" ]
}

# module_dir — the unpacked module (downloaded into our module cache when missing).
module_dir() {
    local dir
    dir="$(kruise_go mod download -json "$KRUISE_MODULE@$KRUISE_VERSION" 2>>"$BUILD_LOG" | jq -r '.Dir // empty')" ||
        die "go mod download $KRUISE_MODULE@$KRUISE_VERSION failed; see $BUILD_LOG"
    [ -d "$dir" ] || die "go mod download gave no directory for $KRUISE_MODULE@$KRUISE_VERSION; see $BUILD_LOG"
    echo "$dir"
}

# prepare_wrapper — the wrapper module (lib.sh go_wrapper_module; generated once per version).
prepare_wrapper() {
    local dir gomod replaces
    [ -f "$KRUISE_WRAPPER_DIR/.tidy-done" ] && return 0
    log "generating the wrapper module for $KRUISE_MODULE $KRUISE_VERSION in $KRUISE_WRAPPER_DIR"
    dir="$(module_dir)"
    gomod="$dir/go.mod"
    replaces="$(awk '/^replace \(/ {b=1; next} b && /^\)/ {b=0} b' "$gomod")"
    [ -n "$replaces" ] || die "no replace block in $gomod"
    grep -q 'k8s.io/cri-api => k8s.io/cri-api ' <<<"$replaces" || die "no k8s.io/cri-api replace in $gomod"
    replaces="$(sed "s#\(k8s.io/cri-api => k8s.io/cri-api\) v[^[:space:]]*#\1 $KRUISE_CRI_API_VERSION#" <<<"$replaces")"
    go_wrapper_module kruise_go "$KRUISE_WRAPPER_DIR" "$BUILD_LOG" "the commands hack/kruise.sh builds" \
        "$KRUISE_MODULE" "$KRUISE_MODULE/cmd/daemon" <<EOF
// Generated by hack/kruise.sh: builds $KRUISE_MODULE $KRUISE_VERSION's manager and daemon.
module crilet.dev/kruise-build

$(awk '/^go [0-9]/' "$gomod")

require $KRUISE_MODULE $KRUISE_VERSION

// Kruise's own replace block, copied; k8s.io/cri-api moved to $KRUISE_CRI_API_VERSION.
replace (
$replaces
)
EOF
}

# prepare_manager_main — kruise-manager's webhook server binds 0.0.0.0 (a literal in its
# main.go, no flag or environment for it), and nothing of ours may listen beyond loopback. Go
# refuses an overlay of a file in the module cache, so the build compiles kruise-manager's
# main package from a copy of the module's own main.go, generated outside the repository in
# the wrapper module, in which only that address is 127.0.0.1 (checked: one line differs).
# Every other package is the module's, as published.
prepare_manager_main() {
    local src out
    src="$(module_dir)/main.go"
    out="$KRUISE_WRAPPER_DIR/kruise-manager/main.go"
    [ "$(grep -c "$WEBHOOK_BIND_LINE" "$src")" = 1 ] ||
        die "$src does not bind its webhook server with the line hack/kruise.sh rewrites"
    mkdir -p "$(dirname "$out")"
    sed "s/$WEBHOOK_BIND_LINE/\1\"127.0.0.1\",/" "$src" >"$out"
    [ "$(diff "$src" "$out" | grep -c '^[<>]')" = 2 ] || die "the copy of $src changes more than its bind address"
}
WEBHOOK_BIND_LINE='^\([[:space:]]*Host:[[:space:]]*\)"0\.0\.0\.0",$'

build_one() {
    local name="$1" pkg="$2" t=$SECONDS
    kruise_built "$name" && return 0
    log "building $name $KRUISE_VERSION (log $BUILD_LOG; cold: about 5 min on 2 cores)"
    if [ "$name" = kruise-manager ]; then
        prepare_manager_main
        pkg=./kruise-manager
    fi
    go_wrapper_build kruise_go "$KRUISE_WRAPPER_DIR" "$BUILD_LOG" "$KRUISE_BIN_DIR/$name" "$pkg" build -trimpath -ldflags "-s -w"
    build_stamp >"$KRUISE_BIN_DIR/$name.stamp"
    log "built $name in $((SECONDS - t))s"
}

cmd_build() {
    if kruise_built kruise-manager && kruise_built kruise-daemon; then
        log "OpenKruise $KRUISE_VERSION already built ($KRUISE_BIN_DIR)"
        return 0
    fi
    command -v go >/dev/null || die "go is not installed (needed to build OpenKruise)"
    command -v jq >/dev/null || die "jq is not installed (run hack/setup.sh)"
    mkdir -p "$LOG_DIR" "$KRUISE_BIN_DIR"
    printf '\n[%s] building OpenKruise %s\n' "$(date +%H:%M:%S)" "$KRUISE_VERSION" >>"$BUILD_LOG"
    prepare_wrapper
    build_one kruise-manager "$KRUISE_MODULE" # built from ./kruise-manager (see prepare_manager_main)
    build_one kruise-daemon "$KRUISE_MODULE/cmd/daemon"
}

# ------------------------------------------------------------------------------------------
# The cluster side
# ------------------------------------------------------------------------------------------
load_cluster_env() {
    [ -f "$CLUSTER_ENV_FILE" ] || die "$CLUSTER_ENV_FILE is missing: run hack/cluster.sh first"
}
kc() { "$KUBECTL_BIN" --kubeconfig "$CLUSTER_ADMIN_KUBECONFIG" --cache-dir "$CLUSTER_DIR/kubectl-cache" "$@"; }
lcurl() { curl -fsS --noproxy '*' --max-time 3 "$@"; }

install_crds() {
    local dir
    dir="$(module_dir)"
    log "applying Kruise's CRDs (server-side) from $dir/config/crd/bases"
    VERBOSE_LOG="$LOG_DIR/kruise-install.log" quietly kc apply --server-side --force-conflicts \
        --field-manager crilet-kruise-sh -f "$dir/config/crd/bases" || die "applying Kruise's CRDs failed"
    VERBOSE_LOG="$LOG_DIR/kruise-install.log" quietly kc wait --for condition=established --timeout 60s \
        -f "$dir/config/crd/bases" || die "Kruise's CRDs were not established"
}

ensure_namespace() {
    kc get namespace "$1" >/dev/null 2>&1 && return 0
    if [ -n "${2:-}" ]; then
        printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels:\n    %s\n' "$1" "$2" | kc create -f - >/dev/null
    else
        kc create namespace "$1" >/dev/null
    fi
}

# The webhook configurations as the chart installs them (selectors of patch_manifests.yaml),
# under the names the manager patches. Created only when missing: the manager rewrites their
# clientConfig (URL and caBundle), which an apply would undo for a moment.
install_webhooks() {
    local dir tmp
    if kc get mutatingwebhookconfiguration kruise-mutating-webhook-configuration >/dev/null 2>&1 &&
        kc get validatingwebhookconfiguration kruise-validating-webhook-configuration >/dev/null 2>&1; then
        return 0
    fi
    dir="$(module_dir)"
    tmp="$(mktemp -d)"
    # kustomize reads only; a copy keeps it away from the read-only module cache's permissions.
    cp -r "$dir/config/webhook" "$tmp/webhook"
    chmod -R u+w "$tmp/webhook"
    kc kustomize "$tmp/webhook" 2>>"$LOG_DIR/kruise-install.log" |
        sed -e 's/^  name: mutating-webhook-configuration$/  name: kruise-mutating-webhook-configuration/' \
            -e 's/^  name: validating-webhook-configuration$/  name: kruise-validating-webhook-configuration/' \
            >"$tmp/webhooks.yaml" || { rm -rf "$tmp"; die "kubectl kustomize of config/webhook failed"; }
    grep -q 'name: kruise-mutating-webhook-configuration' "$tmp/webhooks.yaml" &&
        grep -q 'name: kruise-validating-webhook-configuration' "$tmp/webhooks.yaml" ||
        { rm -rf "$tmp"; die "the rendered webhooks do not carry the expected names"; }
    log "creating Kruise's webhook configurations"
    # Only the two configurations (the render also has the webhook Service, which nothing uses:
    # WEBHOOK_HOST makes the manager point the webhooks at a URL).
    kc create -f "$tmp/webhooks.yaml" --dry-run=client -o json |
        jq -s '{apiVersion: "v1", kind: "List", items: [.[] | select(.kind | test("WebhookConfiguration$"))]}' |
        kc create -f - >>"$LOG_DIR/kruise-install.log" 2>&1 || true
    rm -rf "$tmp"
    kc get mutatingwebhookconfiguration kruise-mutating-webhook-configuration >/dev/null &&
        kc get validatingwebhookconfiguration kruise-validating-webhook-configuration >/dev/null ||
        die "could not create Kruise's webhook configurations"
}

delete_webhooks() {
    [ -f "$CLUSTER_ENV_FILE" ] || return 0
    kc delete mutatingwebhookconfiguration kruise-mutating-webhook-configuration --ignore-not-found --timeout 20s >/dev/null 2>&1 || true
    kc delete validatingwebhookconfiguration kruise-validating-webhook-configuration --ignore-not-found --timeout 20s >/dev/null 2>&1 || true
}

# webhooks_patched — every webhook points at our URL and has a CA bundle (the manager's work).
webhooks_patched() {
    local kind n
    for kind in mutatingwebhookconfiguration/kruise-mutating-webhook-configuration \
        validatingwebhookconfiguration/kruise-validating-webhook-configuration; do
        n="$(kc get "$kind" -o json 2>/dev/null | jq --arg u "https://127.0.0.1:$KRUISE_WEBHOOK_PORT/" \
            '[.webhooks[] | select((.clientConfig.url // "" | startswith($u)) and ((.clientConfig.caBundle // "") != "") | not)] | length')" ||
            return 1
        [ "$n" = 0 ] || return 1
    done
}

# ------------------------------------------------------------------------------------------
# Processes
# ------------------------------------------------------------------------------------------
manager_pidfile() { echo "$KRUISE_RUN/kruise-manager.pid"; }
manager_pid() {
    adopt "$(manager_pidfile)" kruise-manager "$KRUISE_BIN_DIR/kruise-manager" >/dev/null 2>&1 || true
    live_pid "$(manager_pidfile)" "$KRUISE_BIN_DIR/kruise-manager"
}
manager_healthy() { [ "$(lcurl "http://127.0.0.1:$KRUISE_MANAGER_HEALTH_PORT/readyz" 2>/dev/null)" = ok ]; }

manager_argv() {
    ARGV=("$KRUISE_BIN_DIR/kruise-manager" --enable-leader-election=false
        --metrics-addr "127.0.0.1:$KRUISE_MANAGER_METRICS_PORT"
        --health-probe-addr "127.0.0.1:$KRUISE_MANAGER_HEALTH_PORT"
        --enable-pprof=false --pprof-addr 127.0.0.1:0 --feature-gates "$KRUISE_FEATURE_GATES" --v=2)
}

# start_env_daemon PIDFILE LOGFILE ENV... -- CMD... — lib.sh's start_daemon with an environment.
start_env_daemon() {
    local pidfile="$1" logfile="$2" envs=()
    shift 2
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"
    env "${envs[@]}" setsid "$@" </dev/null >>"$logfile" 2>&1 9>&- &
    local pid=$!
    echo "$pid" >"$pidfile"
    await_exec "$pid" "$1" || die "$1 exited right after start (see $logfile): $(tail -n 5 "$logfile" 2>/dev/null)"
}

# stop_manager — for a restart: the webhooks go first (with failurePolicy Fail, a webhook whose
# server is down refuses every pod the cluster creates) and come back for the new manager.
stop_manager() {
    delete_webhooks
    stop_pid "$(manager_pidfile)" "$KRUISE_BIN_DIR/kruise-manager" kruise-manager 20
    install_webhooks
}

ensure_manager() {
    local pid want log="$LOG_DIR/kruise-manager.log" t0=$SECONDS port
    manager_argv
    want="$(printf '%s ' "${ARGV[@]}")"
    if pid="$(manager_pid)"; then
        if [ "$(pid_cmdline "$pid")" != "$want" ]; then
            log "kruise-manager (pid $pid) runs with other flags than this script gives it; restarting it"
            stop_manager
        elif wait_for 30 "kruise-manager (pid $pid) to answer" manager_healthy; then
            log "kruise-manager already running (pid $pid)"
            return 0
        else
            warn "kruise-manager (pid $pid) runs but does not answer; restarting it"
            stop_manager
        fi
    fi
    for port in "$KRUISE_MANAGER_METRICS_PORT" "$KRUISE_MANAGER_HEALTH_PORT" "$KRUISE_WEBHOOK_PORT"; do
        [ -z "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] ||
            die "port $port (for kruise-manager) is taken by a process that is not ours: $(ss -Hltnp "sport = :$port" | head -n1)"
    done
    mkdir -p "$KRUISE_WEBHOOK_CERT_DIR"
    printf '\n[%s] starting kruise-manager\n' "$(date '+%F %T')" >>"$log"
    start_env_daemon "$(manager_pidfile)" "$log" \
        KUBECONFIG="$CLUSTER_ADMIN_KUBECONFIG" POD_NAMESPACE=kruise-system \
        WEBHOOK_HOST=127.0.0.1 WEBHOOK_PORT="$KRUISE_WEBHOOK_PORT" WEBHOOK_CERT_DIR="$KRUISE_WEBHOOK_CERT_DIR" \
        -- "${ARGV[@]}"
    pid="$(cat "$(manager_pidfile)")"
    if ! wait_for "$START_DEADLINE" "kruise-manager to answer /readyz" manager_healthy; then
        tail -n 20 "$log" >&2 || true
        die "kruise-manager (pid $pid) did not become ready within ${START_DEADLINE}s; see $log"
    fi
    log "kruise-manager started (pid $pid, ready after $((SECONDS - t0))s; log $log)"
}

daemon_pidfile() { echo "$KRUISE_RUN/kruise-daemon-$1.pid"; }
daemon_pid() { live_pid "$(daemon_pidfile "$1")" "$KRUISE_BIN_DIR/kruise-daemon"; }
daemon_port() { cat "$KRUISE_RUN/kruise-daemon-$1.port" 2>/dev/null; }
daemon_healthy() { lcurl -o /dev/null "http://127.0.0.1:$(daemon_port "$1")/healthz" 2>/dev/null; }

ensure_hostvarrun() {
    if [ -L "$HOSTVARRUN" ] && [ "$(readlink "$HOSTVARRUN")" = "$HOSTVARRUN_TARGET" ]; then return 0; fi
    [ ! -e "$HOSTVARRUN" ] && [ ! -L "$HOSTVARRUN" ] ||
        die "$HOSTVARRUN exists and is not our symlink to $HOSTVARRUN_TARGET: refusing to touch it"
    ln -s "$HOSTVARRUN_TARGET" "$HOSTVARRUN"
}

free_daemon_port() {
    local port used
    used=" $(cat "$KRUISE_RUN"/kruise-daemon-*.port 2>/dev/null | tr '\n' ' ') "
    for ((port = KRUISE_DAEMON_PORTS[0]; port <= KRUISE_DAEMON_PORTS[1]; port++)); do
        case "$used" in *" $port "*) continue ;; esac
        [ -z "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] && { echo "$port"; return 0; }
    done
    die "no free port for kruise-daemon in ${KRUISE_DAEMON_PORTS[0]}-${KRUISE_DAEMON_PORTS[1]}"
}

cmd_daemon() {
    local node="${1:-}" pid port log t0=$SECONDS
    [ -n "$node" ] || usage
    [[ "$node" =~ ^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$ ]] || die "invalid node name '$node'"
    load_cluster_env
    kruise_built kruise-daemon || die "kruise-daemon is not built: run hack/kruise.sh first"
    log="$LOG_DIR/kruise-daemon-$node.log"
    if pid="$(daemon_pid "$node")" && wait_for 10 "kruise-daemon for $node to answer" daemon_healthy "$node"; then
        log "kruise-daemon for $node already running (pid $pid)"
    else
        [ -z "${pid:-}" ] || stop_pid "$(daemon_pidfile "$node")" "$KRUISE_BIN_DIR/kruise-daemon" "kruise-daemon ($node)" 10
        ensure_hostvarrun
        mkdir -p "$KRUISE_RUN"
        port="$(free_daemon_port)"
        echo "$port" >"$KRUISE_RUN/kruise-daemon-$node.port"
        printf '\n[%s] starting kruise-daemon for node %s\n' "$(date '+%F %T')" "$node" >>"$log"
        start_env_daemon "$(daemon_pidfile "$node")" "$log" \
            KUBECONFIG="$CLUSTER_ADMIN_KUBECONFIG" NODE_NAME="$node" \
            -- "$KRUISE_BIN_DIR/kruise-daemon" --addr "127.0.0.1:$port" --enable-pprof=false \
            --pprof-addr 127.0.0.1:0 --feature-gates "$KRUISE_FEATURE_GATES" --socket-file "$(basename "$CONTAINERD_SOCK")" \
            --plugin-config-file "$KRUISE_STATE/no-credential-plugins.yaml" --v=2
        pid="$(cat "$(daemon_pidfile "$node")")"
        if ! wait_for 60 "kruise-daemon for $node to answer" daemon_healthy "$node"; then
            tail -n 20 "$log" >&2 || true
            die "kruise-daemon for $node (pid $pid) did not answer /healthz; see $log"
        fi
        log "kruise-daemon for $node started (pid $pid, healthy after $((SECONDS - t0))s)"
    fi
    echo "KRUISE_DAEMON_PID=$(daemon_pid "$node")"
    echo "KRUISE_DAEMON_PIDFILE=$(daemon_pidfile "$node")"
    echo "KRUISE_DAEMON_LOG=$log"
    echo "KRUISE_DAEMON_ADDR=127.0.0.1:$(daemon_port "$node")"
}

cmd_daemon_stop() {
    local node="${1:-}"
    [ -n "$node" ] || usage
    stop_pid "$(daemon_pidfile "$node")" "$KRUISE_BIN_DIR/kruise-daemon" "kruise-daemon ($node)" 10
    rm -f "$KRUISE_RUN/kruise-daemon-$node.port"
}

# ------------------------------------------------------------------------------------------
lock() {
    mkdir -p "$CRILET_RUN"
    exec 9>"$KRUISE_LOCK"
    flock -w 1200 9 || die "another hack/kruise.sh holds $KRUISE_LOCK"
}

cmd_up() {
    local t0=$SECONDS node
    load_cluster_env
    kc get --raw /readyz >/dev/null 2>&1 || die "the control plane does not answer: run hack/cluster.sh first"
    cmd_build
    install_crds
    ensure_namespace kruise-system
    ensure_namespace kruise-daemon-config "control-plane: controller-manager"
    install_webhooks
    ensure_manager
    wait_for 60 "kruise-manager to point the webhooks at https://127.0.0.1:$KRUISE_WEBHOOK_PORT" webhooks_patched ||
        die "the webhooks were not patched by kruise-manager; see $LOG_DIR/kruise-manager.log"
    for node in "$@"; do cmd_daemon "$node" >/dev/null; done
    echo "OpenKruise $KRUISE_VERSION ready in $((SECONDS - t0))s: kruise-manager pid $(manager_pid)," \
        "webhooks at https://127.0.0.1:$KRUISE_WEBHOOK_PORT${*:+, daemons for: $*}"
}

cmd_down() {
    local f node
    # The webhooks first: with failurePolicy Fail, a webhook whose server is gone would refuse
    # every pod the cluster creates.
    delete_webhooks
    for f in "$KRUISE_RUN"/kruise-daemon-*.pid; do
        [ -e "$f" ] || continue
        node="$(basename "$f" .pid)"
        cmd_daemon_stop "${node#kruise-daemon-}"
    done
    adopt "$(manager_pidfile)" kruise-manager "$KRUISE_BIN_DIR/kruise-manager" >/dev/null 2>&1 || true
    stop_pid "$(manager_pidfile)" "$KRUISE_BIN_DIR/kruise-manager" kruise-manager 20
    rm -rf "$KRUISE_RUN" "$KRUISE_STATE"
    if [ -L "$HOSTVARRUN" ] && [ "$(readlink "$HOSTVARRUN")" = "$HOSTVARRUN_TARGET" ]; then rm -f "$HOSTVARRUN"; fi
    log "OpenKruise stopped (binaries and build caches in $KRUISE_DIR kept)"
}

cmd_status() {
    local bad=0 pid f node
    if pid="$(manager_pid)"; then
        if manager_healthy; then echo "kruise-manager  running (pid $pid), ready"; else echo "kruise-manager  running (pid $pid), NOT ready"; bad=1; fi
    else
        echo "kruise-manager  not running"; bad=1
    fi
    for f in "$KRUISE_RUN"/kruise-daemon-*.pid; do
        [ -e "$f" ] || continue
        node="$(basename "$f" .pid)"; node="${node#kruise-daemon-}"
        if pid="$(daemon_pid "$node")"; then
            echo "kruise-daemon   node $node: running (pid $pid) on 127.0.0.1:$(daemon_port "$node")"
        else
            echo "kruise-daemon   node $node: not running (stale pid file)"
        fi
    done
    return "$bad"
}

main() {
    local cmd="${1:-up}"
    [ "$#" -gt 0 ] && shift
    case "$cmd" in -v) CRILET_VERBOSE=1; cmd="${1:-up}"; [ "$#" -gt 0 ] && shift ;; esac
    case "$cmd" in
        up) require_root; lock; cmd_up "$@" ;;
        down) require_root; lock; cmd_down ;;
        build) lock; cmd_build ;;
        daemon) require_root; lock; cmd_daemon "$@" ;;
        daemon-stop) require_root; lock; cmd_daemon_stop "$@" ;;
        status) cmd_status ;;
        -h | --help | help) usage 0 ;;
        *) usage ;;
    esac
}
main "$@"
