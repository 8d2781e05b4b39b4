# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this
# hack/lib.sh — shared layout and helpers for crilet's test-environment scripts.
#
# Usage: source it from another hack/ script (it is not meant to be run):
#     . "$(dirname "$0")/lib.sh"
# Layout (fixed, other scripts and the tests rely on it):
#     /var/lib/crilet-dev  persistent: containerd root+config, registry storage, image builds, logs
#     /run/crilet-dev      runtime:    sockets, pid files, runc/CNI state, the env file
# Our containerd listens on /run/crilet-dev/containerd/containerd.sock, the registry on
# 127.0.0.1:5099 (named localhost:5099 in image references). Nothing here touches the
# system containerd (/run/containerd, /var/lib/containerd, /etc/containerd).
# Every helper is safe to call when the environment is only half set up.

# Static pods run as root and crilet refuses group/other-writable manifests: keep what we
# create at 0755/0644 whatever the caller's umask is.
umask 022

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"

CRILET_DEV=/var/lib/crilet-dev
CRILET_RUN=/run/crilet-dev
LOG_DIR="$CRILET_DEV/logs"
ENV_FILE="$CRILET_RUN/env"

# --- containerd (ours) -------------------------------------------------------------------
# Three runtimes are supported and tested (README): CRILET_RUNTIME=2.1 (the default: Debian
# sid's containerd 2.x, minor >= 1, fetched and unpacked into a private prefix, never
# installed; CRI events) or 1.6 (bookworm's system package; relist) is THE environment, one at
# a time. Without the variable, the runtime the environment was last set up with is used, so
# teardown and hack/containerd.sh always act on the containerd that runs.
# CRILET_RUNTIME=2.3 (containerd built from its Go module: the first release that honours CRI
# stop signals) runs BESIDE that environment, never instead of it: its own socket, root, state,
# runc root, pid file, log and env file (below), sharing the registry, images, CNI network and
# egress guard the main environment set up. It is never the default and never recorded in
# $RUNTIME_FILE.
RUNTIME_FILE="$CRILET_RUN/runtime"
CRILET_RUNTIME="${CRILET_RUNTIME:-$(cat "$RUNTIME_FILE" 2>/dev/null || echo 2.1)}"
case "$CRILET_RUNTIME" in
    2.3 | 2.3.*) CRILET_RUNTIME=2.3 ;;
    2 | 2.* ) CRILET_RUNTIME=2.1 ;;
    1.6 | 1.6.*) CRILET_RUNTIME=1.6 ;;
    *) printf 'CRILET_RUNTIME=%s: expected 2.1, 1.6 or 2.3\n' "$CRILET_RUNTIME" >&2; exit 2 ;;
esac
SIDE_BY_SIDE=0
[ "$CRILET_RUNTIME" = 2.3 ] && SIDE_BY_SIDE=1
# sid's containerd lives here, one directory per Debian version, plus a `current` link.
CONTAINERD_SID_DIR="$CRILET_DEV/containerd-sid"
# containerd built from the github.com/containerd/containerd/v2 Go module (CRILET_RUNTIME=2.3):
# the newest v2.3.x the module proxy served when this was pinned (v2.2.9-v2.4.2 are served;
# stop signals, KEP-4960, are in containerd from v2.3.0). Binaries and Go's caches are kept
# under $CONTAINERD_GO_DIR, keyed by version (teardown.sh keeps them; --all removes them).
CONTAINERD_GO_VERSION=v2.3.7
CONTAINERD_GO_MODULE=github.com/containerd/containerd/v2
CONTAINERD_GO_DIR="$CRILET_DEV/containerd-go"
CONTAINERD_GOENV=(GOPATH="$CONTAINERD_GO_DIR/go" GOCACHE="$CONTAINERD_GO_DIR/go/cache"
    GOMODCACHE="$CONTAINERD_GO_DIR/go/mod" GOTOOLCHAIN=local GOFLAGS="-buildvcs=false" CGO_ENABLED=0)
case "$CRILET_RUNTIME" in
    1.6) CONTAINERD_BIN_DIR=/usr/bin ;;
    2.3) CONTAINERD_BIN_DIR="$CONTAINERD_GO_DIR/$CONTAINERD_GO_VERSION/bin" ;;
    *) CONTAINERD_BIN_DIR="$CONTAINERD_SID_DIR/current/usr/bin" ;;
esac
# Each runtime has its own root and config: 2.x migrates the metadata database, which 1.6
# cannot read back.
CONTAINERD_DIR="$CRILET_DEV/containerd-$CRILET_RUNTIME"
CONTAINERD_CONFIG="$CONTAINERD_DIR/config.toml"
CONTAINERD_ROOT="$CONTAINERD_DIR/root"
CONTAINERD_STATE="$CRILET_RUN/containerd-$CRILET_RUNTIME/state"
CONTAINERD_SOCK="$CRILET_RUN/containerd/containerd.sock"
CONTAINERD_PIDFILE="$CRILET_RUN/containerd.pid"
CONTAINERD_LOG="$LOG_DIR/containerd.log"
CONTAINERD_CERTS_D="$CONTAINERD_DIR/certs.d"
CONTAINERD_OPT="$CONTAINERD_DIR/opt"
# runc keeps its container state here instead of /run/containerd/runc.
RUNC_ROOT="$CRILET_RUN/runc"
# The main environment's env file (setup.sh writes it; tests read it).
MAIN_ENV_FILE="$ENV_FILE"
if [ "$SIDE_BY_SIDE" = 1 ]; then
    # Everything that would clash with the main environment's containerd gets its own path.
    CONTAINERD_SOCK="$CRILET_RUN/containerd-$CRILET_RUNTIME/containerd.sock"
    CONTAINERD_PIDFILE="$CRILET_RUN/containerd-$CRILET_RUNTIME.pid"
    CONTAINERD_LOG="$LOG_DIR/containerd-$CRILET_RUNTIME.log"
    RUNC_ROOT="$CRILET_RUN/runc-$CRILET_RUNTIME"
    ENV_FILE="$CRILET_RUN/env-$CRILET_RUNTIME"
fi
K8S_NS=k8s.io

# --- CNI ---------------------------------------------------------------------------------
CNI_BIN_DIR=/usr/lib/cni
CNI_CONF_DIR="$CRILET_DEV/cni/net.d"
CNI_NETWORK=crilet
CNI_BRIDGE=crilet0
POD_CIDR=10.88.77.0/24
# host-local's reservations live with the network namespaces' lifetime (tmp-like /run),
# in a private directory so a teardown can tell our leases from anyone else's.
CNI_IPAM_DIR="$CRILET_RUN/cni/ipam"
# iptables chain that keeps pod traffic on this machine (see setup.sh: install_egress_guard).
GUARD_CHAIN=CRILET-DEV-GUARD

# What setup found missing and made, so teardown removes exactly that (kept in the persistent
# directory: a reboot between setup and teardown must not make teardown forget).
OWNED_DIR="$CRILET_DEV/owned"
# The kubelet-style pod cgroup parent, in every hierarchy.
KUBEPODS=kubepods
# The CNI portmap plugin's shared nat chains.
PORTMAP_CHAINS=(CNI-HOSTPORT-DNAT CNI-HOSTPORT-SETMARK CNI-HOSTPORT-MASQ)

# --- registry ----------------------------------------------------------------------------
REGISTRY_LISTEN=127.0.0.1:5099
REGISTRY=localhost:5099
# A registry with basic auth, started by tests/cluster.rs for imagePullSecrets (setup only
# writes its hosts.toml: plain http on loopback).
AUTH_REGISTRY=localhost:5098
# A registry that answers every request after a delay, a proxy in front of REGISTRY that the
# Kruise benchmark starts (benches/kruise/slow_registry.rs; setup only writes its hosts.toml).
SLOW_REGISTRY=localhost:5097
REGISTRY_DIR="$CRILET_DEV/registry"
REGISTRY_CONFIG="$REGISTRY_DIR/config.yml"
REGISTRY_STORAGE="$REGISTRY_DIR/storage"
REGISTRY_PIDFILE="$CRILET_RUN/registry.pid"
REGISTRY_LOG="$LOG_DIR/registry.log"

# --- images ------------------------------------------------------------------------------
IMAGE_BUILD_DIR="$CRILET_DEV/images"
IMAGE_PAUSE="$REGISTRY/pause:3.10"
IMAGE_BUSYBOX="$REGISTRY/busybox:1.36"
IMAGE_WEB_V1="$REGISTRY/web:v1"
IMAGE_WEB_V2="$REGISTRY/web:v2"

# --- crilet (started by demo.sh) ---------------------------------------------------------
CRILET_PIDFILE="$CRILET_RUN/crilet.pid"
CRILET_SOCK="$CRILET_RUN/crilet.sock"
CRILET_LOG="$LOG_DIR/crilet.log"
CRILET_ROOT_DIR="$CRILET_DEV/agent"
CRILET_POD_LOGS_DIR="$CRILET_DEV/pod-logs"
DEMO_MANIFESTS="$CRILET_DEV/demo-manifests"

# --- Kubernetes control plane (hack/cluster.sh) ------------------------------------------
# Upstream kube-apiserver/-controller-manager/-scheduler (and, on request, the kubelet) built
# from the k8s.io/kubernetes Go module; etcd and kubectl from Debian sid, unpacked into a
# private prefix. Everything listens on 127.0.0.1 only.
K8S_VERSION=v1.36.3
# The staging modules (k8s.io/api, k8s.io/apiserver, ...) of that release.
K8S_STAGING_VERSION=v0.36.3
# etcd: the upstream version (whatever Debian revision of it sid has); kubectl: the exact
# Debian version (the image may carry another `kubectl` package with a higher epoch).
ETCD_VERSION=3.5.30
KUBECTL_DEB_VERSION=1.36.4+ds-1
# Build caches and binaries (persistent, keyed by version; kept by teardown.sh, removed only
# with teardown.sh --all, which deletes all of /var/lib/crilet-dev).
K8S_DIR="$CRILET_DEV/k8s"
K8S_BIN_DIR="$K8S_DIR/$K8S_VERSION/bin"
K8S_MODULE=k8s.io/kubernetes
K8S_WRAPPER_DIR="$K8S_DIR/$K8S_VERSION/wrapper"
K8S_BUILD_LOG="$LOG_DIR/cluster-build.log"
K8S_GOENV=(GOPATH="$K8S_DIR/go" GOCACHE="$K8S_DIR/go/cache" GOMODCACHE="$K8S_DIR/go/mod"
    GOTOOLCHAIN=local GOFLAGS="-buildvcs=false" CGO_ENABLED=0)
# k8s_go runs go at this niceness (hack/e2e.sh's long builds: 10).
K8S_GO_NICE=0
K8S_SID_DIR="$K8S_DIR/sid"
ETCD_BIN="$K8S_SID_DIR/etcd-server-$ETCD_VERSION/usr/bin/etcd"
KUBECTL_BIN="$K8S_SID_DIR/kubectl-$KUBECTL_DEB_VERSION/usr/bin/kubectl"
# The cluster's own state: PKI, kubeconfigs, node identities, etcd data. `cluster.sh down`
# removes the etcd data (the next up starts empty) and keeps the PKI; teardown.sh (cluster.sh
# down --purge) removes all of it, and the next up makes a new CA.
CLUSTER_DIR="$CRILET_DEV/cluster"
CLUSTER_PKI="$CLUSTER_DIR/pki"
CLUSTER_ETCD_DATA="$CLUSTER_DIR/etcd"
CLUSTER_ADMIN_KUBECONFIG="$CLUSTER_DIR/admin.kubeconfig"
CLUSTER_NODES_DIR="$CLUSTER_DIR/nodes"
CLUSTER_AUDIT_POLICY="$CLUSTER_DIR/audit-policy.yaml"
# What node identities asked the API server (JSON lines; see hack/cluster.sh ensure_audit_policy).
CLUSTER_AUDIT_LOG="$LOG_DIR/cluster-audit.log"
# Runtime: pid files and the env file.
CLUSTER_RUN="$CRILET_RUN/cluster"
CLUSTER_ENV_FILE="$CLUSTER_RUN/env"
# Ports on 127.0.0.1 (none of them a default port, so a system etcd/Kubernetes can coexist).
CLUSTER_ETCD_CLIENT_PORT=2479
CLUSTER_ETCD_PEER_PORT=2480
CLUSTER_APISERVER_PORT=16443
CLUSTER_KCM_PORT=16257
CLUSTER_SCHEDULER_PORT=16259
# metrics-server (on demand: hack/cluster.sh metrics-server), its secure port on 127.0.0.1.
CLUSTER_METRICS_SERVER_PORT=14443
CLUSTER_PORTS=("$CLUSTER_ETCD_CLIENT_PORT" "$CLUSTER_ETCD_PEER_PORT" "$CLUSTER_APISERVER_PORT"
    "$CLUSTER_KCM_PORT" "$CLUSTER_SCHEDULER_PORT" "$CLUSTER_METRICS_SERVER_PORT")
CLUSTER_SERVER="https://127.0.0.1:$CLUSTER_APISERVER_PORT"
# The processes, in start order (pid files $CLUSTER_RUN/NAME.pid, logs $LOG_DIR/cluster-NAME.log).
CLUSTER_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler)

# --- OpenKruise (hack/kruise.sh) ---------------------------------------------------------
# kruise-manager and one kruise-daemon per crilet node, as processes on 127.0.0.1: pid files in
# $KRUISE_RUN, logs $LOG_DIR/kruise-*.log, binaries and Go caches under $KRUISE_DIR (kept by
# teardown.sh, removed with --all).
KRUISE_VERSION=v1.8.2
KRUISE_DIR="$CRILET_DEV/kruise"
KRUISE_RUN="$CRILET_RUN/kruise"
KRUISE_MANAGER_METRICS_PORT=16290
KRUISE_MANAGER_HEALTH_PORT=16291
KRUISE_WEBHOOK_PORT=16292
# Each daemon's health/metrics port comes from this range.
KRUISE_DAEMON_PORTS=(16300 16399)
# hack/guest.sh's QEMU guest (systemd as PID 1, cgroup v2): the image is a cache (kept by
# teardown, removed with --all), the run directory (overlay, share, console, pid) one boot's.
GUEST_CACHE="$CRILET_DEV/guest"
GUEST_RUN="$CRILET_DEV/guest-run"
GUEST_SHARE="$GUEST_RUN/share"
GUEST_SSH_PORT="${CRILET_GUEST_SSH_PORT:-2222}"
GUEST_MEM="${CRILET_GUEST_MEM:-2048}"
# The guest's address for the host's API server: slirp forwards connections to it (guestfwd)
# to 127.0.0.1:$CLUSTER_APISERVER_PORT, one socat per connection. Nothing else of the host is
# reachable from the guest.
GUEST_HOST_LOOPBACK=10.0.2.100

# kruise-daemon reads the CRI socket under this fixed path (its chart mounts /var/run there):
# kruise.sh makes it a symlink to our containerd's socket directory, and `down` removes it.
HOSTVARRUN=/hostvarrun

# Quiet by default: noisy tools (apt, cargo) write to $VERBOSE_LOG; CRILET_VERBOSE=1 (or -v
# to demo.sh/setup.sh) shows everything.
VERBOSE_LOG="$LOG_DIR/setup.log"
CRILET_VERBOSE="${CRILET_VERBOSE:-0}"

# quietly CMD... — run CMD with its output in $VERBOSE_LOG (shown as it comes with
# CRILET_VERBOSE=1); on failure, show the end of it.
quietly() {
    if [ "$CRILET_VERBOSE" = 1 ]; then
        "$@"
        return
    fi
    mkdir -p "$(dirname "$VERBOSE_LOG")"
    printf '\n[%s] $ %s\n' "$(date +%H:%M:%S)" "$*" >>"$VERBOSE_LOG"
    if ! "$@" >>"$VERBOSE_LOG" 2>&1; then
        tail -n 25 "$VERBOSE_LOG" >&2
        printf '[hack] ERROR: %s failed; full output in %s\n' "$1" "$VERBOSE_LOG" >&2
        return 1
    fi
}

# ----------------------------------------------------------------------------------------
log() { printf '[hack %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
warn() { printf '[hack %s] WARNING: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[hack %s] ERROR: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

require_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (containerd, CNI and iptables need it)"
}

# ctr against OUR containerd only; never the default /run/containerd socket.
ctrd() { "$CONTAINERD_BIN_DIR/ctr" --address "$CONTAINERD_SOCK" "$@"; }
ctrk() { "$CONTAINERD_BIN_DIR/ctr" --address "$CONTAINERD_SOCK" -n "$K8S_NS" "$@"; }

# wait_for SECONDS WHAT CMD... — poll CMD (quietly) until it succeeds or the deadline passes.
wait_for() {
    local secs="$1" what="$2"; shift 2
    local deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            warn "timed out after ${secs}s waiting for $what"
            return 1
        fi
        sleep 0.2
    done
}

# pid_cmdline PID — the process's argv joined by spaces (empty if it is gone).
pid_cmdline() { { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null || true; }

# live_pid PIDFILE MARKER — print the PID from PIDFILE if that process still runs and its
# argv contains MARKER (a path private to us). A stale file, or a PID reused by an unrelated
# process, yields nothing and status 1, so we never signal someone else's process.
live_pid() {
    local pidfile="$1" marker="$2" pid
    [ -s "$pidfile" ] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
    case "$(pid_cmdline "$pid")" in
        *"$marker"*) echo "$pid" ;;
        *) return 1 ;;
    esac
}

# find_by_argv EXE MARKER — print the first PID whose argv[0] ends in EXE and whose argv
# contains MARKER (our private config path); status 1 if none. Used only to re-adopt a
# process of ours whose pid file was lost; the marker is a path nobody else uses, so this
# cannot match a foreign process.
find_by_argv() {
    local exe="$1" marker="$2" d pid cmd
    for d in /proc/[0-9]*; do
        pid="${d#/proc/}"
        cmd="$(pid_cmdline "$pid")"
        case "$cmd" in
            *"$marker"*) ;;
            *) continue ;;
        esac
        case "${cmd%% *}" in
            "$exe" | */"$exe") echo "$pid"; return 0 ;;
        esac
    done
    return 1
}

# adopt PIDFILE EXE MARKER — make PIDFILE point at our running EXE if it is running.
adopt() {
    local pidfile="$1" exe="$2" marker="$3" pid
    live_pid "$pidfile" "$marker" >/dev/null && return 0
    pid="$(find_by_argv "$exe" "$marker")" || return 1
    mkdir -p "$(dirname "$pidfile")"
    echo "$pid" >"$pidfile"
    log "re-adopted running $exe (pid $pid) into $pidfile"
}

# stop_pid PIDFILE MARKER NAME [GRACE] — SIGTERM, wait up to GRACE seconds, then SIGKILL.
# Only the one process is signalled (never its group): containerd's shims must live on.
stop_pid() {
    local pidfile="$1" marker="$2" name="$3" grace="${4:-15}" pid deadline
    if ! pid="$(live_pid "$pidfile" "$marker")"; then
        rm -f "$pidfile"
        return 0
    fi
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + grace))
    while [ -d "/proc/$pid" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    if [ -d "/proc/$pid" ]; then
        warn "$name (pid $pid) ignored SIGTERM for ${grace}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        wait_for 10 "$name to die" test ! -d "/proc/$pid" || true
    fi
    rm -f "$pidfile"
}

# start_daemon PIDFILE LOGFILE CMD... — run CMD detached from our session (so a CI job's
# process-group cleanup or a closed terminal does not take it down) and record its PID.
# setsid does not fork here (a non-interactive shell's background job is no group leader),
# so $! is the daemon itself; the check below makes sure of it.
start_daemon() {
    local pidfile="$1" logfile="$2"; shift 2
    mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"
    setsid "$@" </dev/null >>"$logfile" 2>&1 &
    local pid=$!
    echo "$pid" >"$pidfile"
    await_exec "$pid" "$1" || die "$1 exited right after start (see $logfile): $(tail -n 5 "$logfile" 2>/dev/null)"
}

# await_exec PID CMD — wait (up to 5 s) until the background job PID runs CMD. Right after the
# fork it is still a copy of this shell; on a loaded machine the exec can take a while, so one
# look after a fixed sleep could call a daemon that is starting fine "exited".
await_exec() {
    local i
    for i in $(seq 50); do
        case "$(pid_cmdline "$1")" in
            *"$2"*) return 0 ;;
        esac
        [ -d "/proc/$1" ] || return 1
        sleep 0.1
    done
    return 1
}

containerd_pid() { live_pid "$CONTAINERD_PIDFILE" "$CONTAINERD_CONFIG"; }
containerd_answers() { ctrd version >/dev/null 2>&1; }

# peer_nodes NODE... — what a side-by-side run of crilet and the upstream kubelet needs (the
# cluster benchmark, hack/security-peer.sh): the containerd 2.1 environment (set up when it does
# not answer), the upstream kubelet built, the control plane up, and each NODE's identity.
peer_nodes() {
    if ! { [ -s "$ENV_FILE" ] && [ "$CRILET_RUNTIME" = 2.1 ] && containerd_answers; }; then
        log "setting up the containerd 2.1 environment (hack/setup.sh)"
        CRILET_RUNTIME=2.1 bash "$HACK_DIR/setup.sh"
    fi
    bash "$HACK_DIR/cluster.sh" build kubelet
    bash "$HACK_DIR/cluster.sh"
    local node
    for node in "$@"; do
        bash "$HACK_DIR/cluster.sh" node "$node" >/dev/null
    done
}
registry_pid() { live_pid "$REGISTRY_PIDFILE" "$REGISTRY_CONFIG"; }
registry_answers() { curl -fsS --max-time 2 -o /dev/null "http://$REGISTRY_LISTEN/v2/" 2>/dev/null; }

# registry_digest NAME TAG — manifest digest the local registry serves for NAME:TAG
# (empty output if it has none).
registry_digest() {
    { curl -fsS --max-time 5 -o /dev/null -D - \
        -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
        -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        "http://$REGISTRY_LISTEN/v2/$1/manifests/$2" 2>/dev/null || true; } |
        tr -d '\r' | awk -F': ' 'tolower($1)=="docker-content-digest" {print $2}'
}

start_registry() {
    local pid
    if adopt "$REGISTRY_PIDFILE" docker-registry "$REGISTRY_CONFIG"; then
        pid="$(registry_pid)"
        wait_for 30 "registry on $REGISTRY_LISTEN" registry_answers || die "registry (pid $pid) does not answer"
        log "registry already running (pid $pid)"
        return 0
    fi
    if registry_answers; then
        die "something else already answers on http://$REGISTRY_LISTEN/v2/ — not ours, refusing to continue"
    fi
    mkdir -p "$REGISTRY_STORAGE"
    start_daemon "$REGISTRY_PIDFILE" "$REGISTRY_LOG" docker-registry serve "$REGISTRY_CONFIG"
    wait_for 30 "registry on $REGISTRY_LISTEN" registry_answers ||
        die "registry did not come up; last log lines: $(tail -n 20 "$REGISTRY_LOG")"
    log "registry started (pid $(cat "$REGISTRY_PIDFILE")) on $REGISTRY_LISTEN"
}

stop_registry() {
    # Re-adopt a registry of ours whose pid file was lost, so it is not left behind.
    adopt "$REGISTRY_PIDFILE" docker-registry "$REGISTRY_CONFIG" || true
    stop_pid "$REGISTRY_PIDFILE" "$REGISTRY_CONFIG" registry 10
}

# systemd_is_init — true only when systemd is PID 1 (sd_booted(3)'s test plus the comm).
systemd_is_init() {
    [ -d /run/systemd/system ] && [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]
}

# crate_version — crilet's version: Cargo.toml's [package] version.
crate_version() {
    awk -F'"' '/^\[/ {p = ($0 == "[package]")} p && /^version *=/ {print $2; exit}' "$REPO_ROOT/Cargo.toml"
}

# crilet_unit BINDIR DEST — write systemd/crilet.service to DEST as installed with the binary in
# BINDIR: the file itself, but ExecStart runs BINDIR/crilet instead of /usr/local/bin/crilet
# (hack/install.sh's default; the Debian package's is /usr/bin). That is the only difference,
# and it must apply.
crilet_unit() {
    local unit="$REPO_ROOT/systemd/crilet.service"
    sed "s#^ExecStart=/usr/local/bin/crilet #ExecStart=$1/crilet #" "$unit" >"$2"
    grep -qxF "ExecStart=$1/crilet run --config /etc/crilet/config.yaml" "$2" ||
        die "$unit: no 'ExecStart=/usr/local/bin/crilet run --config /etc/crilet/config.yaml' to point at $1/crilet"
}

# --- CNI network definition --------------------------------------------------------------
# Each plugin's JSON is kept separately so teardown.sh can run the same chain's DEL by hand
# (there is no crictl here, and deleting containers with ctr bypasses the CRI plugin's CNI
# teardown). The CRI plugin adds the loopback network (/usr/lib/cni/loopback) on its own,
# so it is not part of this list.
# ipMasq=false and the iptables guard in setup.sh keep pod traffic on this machine.
cni_plugin_bridge() {
    cat <<JSON
{"type": "bridge", "bridge": "$CNI_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
 "ipam": {"type": "host-local", "dataDir": "$CNI_IPAM_DIR",
          "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}}
JSON
}
cni_plugin_portmap() {
    echo '{"type": "portmap", "capabilities": {"portMappings": true}}'
}
cni_conflist() {
    cat <<JSON
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    $(cni_plugin_bridge),
    $(cni_plugin_portmap)
  ]
}
JSON
}

# --- containerd config ---------------------------------------------------------------------
# containerd_config VERSION [KEY=VALUE...] — a private containerd config: VERSION 2 for
# containerd 1.6, 3 (the same settings under 2.x's plugin names: the CRI plugin is split into
# cri.v1.images, cri.v1.runtime and grpc.v1.cri) for 2.x. By default it is the main
# environment's (hack/setup.sh); hack/critest.sh's containerd replaces these settings:
#   header, root, state, sock, opt, sandbox (image), runc_root, cni_conf_dir, certs_d,
#   netns_in_state (true: netns under the state dir instead of the shared /var/run/netns),
#   nri_socket and nri_dir (version 3; without nri_socket NRI is disabled: it would put a
#   socket under /var/run/nri, outside our private directories), systemd_cgroup (runc's
#   systemd cgroup driver, for hack/guest.sh's systemd node; default false), runc (the runc
#   binary containerd's runc runtime runs, its BinaryName; default: the one on containerd's
#   PATH).
# Everything containerd would otherwise put under /run/containerd, /var/lib/containerd or
# /opt/containerd is private, except the shim sockets: containerd hard-codes /run/containerd/s
# (names are hashed with our socket address, so they cannot clash with a system containerd's).
containerd_config() {
    local version="$1" kv
    local header="# Generated by hack/setup.sh — edits are overwritten." root="$CONTAINERD_ROOT"
    local state="$CONTAINERD_STATE" sock="$CONTAINERD_SOCK" opt="$CONTAINERD_OPT" sandbox="$IMAGE_PAUSE"
    local runc_root="$RUNC_ROOT" cni_conf_dir="$CNI_CONF_DIR" certs_d="$CONTAINERD_CERTS_D"
    local netns_in_state=false nri_socket="" nri_dir="" systemd_cgroup=false runc=""
    case "$version" in 2 | 3) ;; *) die "containerd_config: version $version (expected 2 or 3)" ;; esac
    shift
    for kv in "$@"; do
        case "${kv%%=*}" in
            header | root | state | sock | opt | sandbox | runc_root | cni_conf_dir | certs_d | netns_in_state | nri_socket | nri_dir | systemd_cgroup | runc)
                printf -v "${kv%%=*}" '%s' "${kv#*=}" ;;
            *) die "containerd_config: unknown setting $kv" ;;
        esac
    done
    # runc's BinaryName, on a line of its own after Root (none: containerd's PATH finds runc).
    local binary_name=""
    [ -z "$runc" ] || binary_name=$'\n'"          BinaryName = \"$runc\""
    local netns_comment="# Keep the kubelet's (and crictl's) expectation: netns under /var/run/netns/cni-*."
    [ "$netns_in_state" = true ] &&
        netns_comment="# Network namespaces live under our state dir, not in the shared /var/run/netns."
    echo "$header"
    echo "version = $version"
    cat <<EOF
root = "$root"
state = "$state"
# Snapshotters that cannot work on this machine only add errors to the log.
disabled_plugins = [
EOF
    if [ "$version" = 2 ]; then
        echo '  "io.containerd.snapshotter.v1.aufs",'
    fi
    cat <<EOF
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
EOF
    if [ "$version" != 2 ]; then
        echo '  "io.containerd.snapshotter.v1.erofs",'
        [ -n "$nri_socket" ] || echo '  "io.containerd.nri.v1.nri",'
    fi
    cat <<EOF
]

[grpc]
  address = "$sock"

[ttrpc]
  address = ""

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins]
EOF
    if [ "$version" = 2 ]; then
        cat <<EOF
  [plugins."io.containerd.internal.v1.opt"]
    path = "$opt"

  [plugins."io.containerd.grpc.v1.cri"]
    # Without CAP_SYS_RESOURCE every sandbox fails with "can't get final child's PID from
    # pipe" unless oom_score_adj is clamped to containerd's own.
    restrict_oom_score_adj = true
    sandbox_image = "$sandbox"
    $netns_comment
    netns_mounts_under_state_dir = $netns_in_state
    # The streaming server (exec/attach/port-forward) listens on loopback only.
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          # The cgroup driver: cgroupfs on the host (PID 1 is not systemd); the guest of
          # hack/guest.sh runs either.
          SystemdCgroup = $systemd_cgroup
          Root = "$runc_root"$binary_name

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN_DIR"
      conf_dir = "$cni_conf_dir"
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$certs_d"
EOF
        return
    fi
    cat <<EOF
  [plugins.'io.containerd.internal.v1.opt']
    path = "$opt"

EOF
    [ -z "$nri_socket" ] || cat <<EOF
  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = "$nri_socket"
    plugin_path = "$nri_dir/plugins"
    plugin_config_path = "$nri_dir/conf.d"

EOF
    cat <<EOF
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"

    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$sandbox"

    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = "$certs_d"

  [plugins.'io.containerd.cri.v1.runtime']
    # Without CAP_SYS_RESOURCE every sandbox fails with "can't get final child's PID from
    # pipe" unless oom_score_adj is clamped to containerd's own.
    restrict_oom_score_adj = true
    $netns_comment
    netns_mounts_under_state_dir = $netns_in_state
    # No CDI spec directories: nothing here uses devices, and /etc/cdi is not ours.
    enable_cdi = false

    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          # The cgroup driver: cgroupfs on the host (PID 1 is not systemd); the guest of
          # hack/guest.sh runs either.
          SystemdCgroup = $systemd_cgroup
          Root = "$runc_root"$binary_name

    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$CNI_BIN_DIR"]
      conf_dir = "$cni_conf_dir"
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    # The streaming server (exec/attach/port-forward) listens on loopback only.
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
EOF
}

# --- packages from Debian sid ---------------------------------------------------------------
# What we take from sid (containerd 2.x here, etcd and kubectl for hack/cluster.sh, busybox-static
# for hack/e2e.sh) is fetched with `apt-get download` through ONE apt state of our own (the
# system's sources, lists and cache are untouched) and unpacked with dpkg-deb -x into a private
# prefix: never installed.
SID_APT_DIR="$CONTAINERD_SID_DIR/apt"
SID_APT_OPTS=(-o "Dir::Etc::SourceList=$SID_APT_DIR/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$SID_APT_DIR/lists" -o "Dir::Cache=$SID_APT_DIR/cache"
    -o "Dir::Cache::Archives=$SID_APT_DIR/archives" -o Dir::State::status=/dev/null)
SID_UPDATED=0

sid_apt_init() {
    mkdir -p "$SID_APT_DIR/lists/partial" "$SID_APT_DIR/archives/partial" "$SID_APT_DIR/cache"
    echo "deb http://deb.debian.org/debian sid main" >"$SID_APT_DIR/sources.list"
}

# sid_update — refresh the sid index (once per process).
sid_update() {
    [ "$SID_UPDATED" = 1 ] && return 0
    sid_apt_init
    log "updating the Debian sid index (private apt state in $SID_APT_DIR)"
    apt-get "${SID_APT_OPTS[@]}" update -q >"$SID_APT_DIR/update.log" 2>&1 ||
        die "apt-get update for Debian sid failed; see $SID_APT_DIR/update.log"
    SID_UPDATED=1
}

# sid_versions PKG — every version of PKG the sid index offers.
sid_versions() {
    sid_apt_init
    apt-cache "${SID_APT_OPTS[@]}" show "$1" 2>/dev/null | awk '/^Version:/ {print $2}'
}

# sid_highest PKG [GLOB] — the highest version of PKG in the index that matches GLOB (default
# any); empty output if none does.
sid_highest() {
    local v best=""
    for v in $(sid_versions "$1"); do
        # shellcheck disable=SC2254  # GLOB is a pattern
        case "$v" in ${2:-*}) ;; *) continue ;; esac
        if [ -z "$best" ] || dpkg --compare-versions "$v" gt "$best"; then best="$v"; fi
    done
    echo "$best"
}

# sid_find VAR PKG [GLOB] — set VAR to sid_highest PKG GLOB: from the index as it is when that
# has a match (it is shared and often fresh enough), else after sid_update. Not a command
# substitution, so that sid_update's once-per-process mark sticks.
sid_find() {
    local _sid_var="$1" _sid_v
    shift
    _sid_v="$(sid_highest "$@")"
    if [ -z "$_sid_v" ]; then
        sid_update
        _sid_v="$(sid_highest "$@")"
    fi
    printf -v "$_sid_var" '%s' "$_sid_v"
}

# sid_unpack PKG VERSION DEST — download PKG=VERSION and unpack it into DEST (replaced whole;
# DEST/.debian-version says which version it holds).
sid_unpack() {
    local pkg="$1" version="$2" dest="$3" dl="$SID_APT_DIR/download-$1.log"
    sid_apt_init
    rm -f "$SID_APT_DIR/archives/${pkg}_"*.deb
    (cd "$SID_APT_DIR/archives" && apt-get "${SID_APT_OPTS[@]}" download -q "$pkg=$version" >"$dl" 2>&1) ||
        die "apt-get download $pkg=$version failed; see $dl"
    rm -rf "$dest.tmp"
    mkdir -p "$(dirname "$dest")"
    dpkg-deb -x "$SID_APT_DIR/archives/${pkg}_"*.deb "$dest.tmp"
    echo "$version" >"$dest.tmp/.debian-version"
    rm -rf "$dest"
    mv "$dest.tmp" "$dest"
    rm -f "$SID_APT_DIR/archives/${pkg}_"*.deb
}

# --- containerd 2.x from Debian sid -------------------------------------------------------
# Pinned to the major.minor the suite is tested on; a newer 2.x minor is taken too (and said
# so), anything else stops with a clear message.
CONTAINERD_SID_MIN_MINOR=1

# ensure_containerd_sid — make $CONTAINERD_SID_DIR/current hold sid's containerd 2.x
# (containerd, containerd-shim-runc-v2, ctr), unpacked from sid's package (above). Not sid's
# runc, which needs glibc 2.38: ensure_runc_go builds one. Reruns reuse what is there; CRILET_REFRESH_SID=1 looks
# for a newer package.
ensure_containerd_sid() {
    if [ -x "$CONTAINERD_SID_DIR/current/usr/bin/containerd" ] && [ "${CRILET_REFRESH_SID:-0}" != 1 ]; then
        return 0
    fi
    local version minor
    log "looking up containerd 2.x in Debian sid"
    # Always a fresh index: a cached one may name a version the archive no longer serves.
    sid_update
    # The highest 2.x; its minor must be at least CONTAINERD_SID_MIN_MINOR.
    version="$(sid_highest containerd '2.*')"
    minor="${version#*.}"; minor="${minor%%.*}"
    [ -n "$version" ] && [ "$minor" -ge "$CONTAINERD_SID_MIN_MINOR" ] 2>/dev/null ||
        die "Debian sid no longer offers containerd 2.$CONTAINERD_SID_MIN_MINOR or a newer 2.x" \
            "(it has: $(sid_versions containerd | tr '\n' ' '))." \
            "Use CRILET_RUNTIME=1.6, or adapt CONTAINERD_SID_MIN_MINOR in hack/lib.sh."
    case "$version" in
        2."$CONTAINERD_SID_MIN_MINOR".*) ;;
        *) warn "sid has containerd $version, newer than the 2.$CONTAINERD_SID_MIN_MINOR the suite is tested on; using it" ;;
    esac
    local dest="$CONTAINERD_SID_DIR/$version"
    [ -x "$dest/usr/bin/containerd" ] || sid_unpack containerd "$version" "$dest"
    ln -sfn "$version" "$CONTAINERD_SID_DIR/current"
    "$dest/usr/bin/containerd" --version >/dev/null ||
        die "sid's containerd $version does not run on this machine"
    log "containerd $version from Debian sid in $dest"
}

# --- containerd 2.3 from its Go module ------------------------------------------------------
# ensure_containerd_go — make $CONTAINERD_BIN_DIR (CRILET_RUNTIME=2.3) hold containerd,
# containerd-shim-runc-v2 and ctr built from $CONTAINERD_GO_MODULE@$CONTAINERD_GO_VERSION (the
# Go module proxy; Go's caches private under $CONTAINERD_GO_DIR/go). Pure Go (CGO_ENABLED=0):
# the btrfs, devmapper and zfs snapshotters need cgo or are useless here, so they are left out
# by build tag; the shim is built that way upstream too. runc is ensure_runc_go's, as for 2.1.
# A build takes a few minutes on 2 cores (niced); reruns reuse the binaries.
ensure_containerd_go() {
    local bin="$CONTAINERD_GO_DIR/$CONTAINERD_GO_VERSION/bin" build_log="$LOG_DIR/containerd-go-build.log" dir
    if [ -x "$bin/containerd" ] && [ -x "$bin/containerd-shim-runc-v2" ] && [ -x "$bin/ctr" ]; then
        return 0
    fi
    command -v go >/dev/null || die "go is not installed (needed to build containerd $CONTAINERD_GO_VERSION)"
    mkdir -p "$LOG_DIR" "$CONTAINERD_GO_DIR"
    log "building containerd $CONTAINERD_GO_VERSION from $CONTAINERD_GO_MODULE (go module proxy; log $build_log)"
    : >"$build_log"
    dir="$(env "${CONTAINERD_GOENV[@]}" go mod download -json "$CONTAINERD_GO_MODULE@$CONTAINERD_GO_VERSION" 2>>"$build_log" |
        jq -r '.Dir // empty')" || die "go mod download $CONTAINERD_GO_MODULE@$CONTAINERD_GO_VERSION failed; see $build_log"
    [ -d "$dir/cmd/containerd" ] || die "no cmd/containerd in $dir; see $build_log"
    rm -rf "$bin.tmp"
    mkdir -p "$bin.tmp"
    # The version the daemon reports (CRI Version, `ctr version`), as upstream's Makefile sets it.
    (cd "$dir" && env "${CONTAINERD_GOENV[@]}" nice -n 10 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
        -ldflags "-X $CONTAINERD_GO_MODULE/version.Version=$CONTAINERD_GO_VERSION" -o "$bin.tmp/" \
        ./cmd/containerd ./cmd/containerd-shim-runc-v2 ./cmd/ctr) >>"$build_log" 2>&1 ||
        die "building containerd $CONTAINERD_GO_VERSION failed; see $build_log"
    rm -rf "$bin"
    mv "$bin.tmp" "$bin"
    "$bin/containerd" --version >/dev/null || die "the containerd built in $bin does not run"
    log "built $("$bin/containerd" --version) into $bin"
}

# --- runc from its Go module ---------------------------------------------------------------
# User namespaces (hostUsers: false) need runc >= 1.2 (idmapped mounts; containerd's CRI
# handler reports user_namespaces only then). Bookworm's runc is 1.1.5 and sid's .deb (1.3.6)
# needs glibc 2.38 (bookworm has 2.36), so runc is built from its Go module: cgo with
# libseccomp (libseccomp-dev from apt, bookworm's 2.5.4), Go's caches private under
# $RUNC_GO_DIR, the binary in $RUNC_GO_DIR/$RUNC_GO_VERSION (about a minute on 2 cores; reruns
# reuse it). The containerd configs name it as runc's BinaryName (containerd_config runc=).
RUNC_GO_VERSION=v1.3.7
RUNC_GO_MODULE=github.com/opencontainers/runc
RUNC_GO_DIR="$CRILET_DEV/runc-go"
RUNC_GOENV=(GOPATH="$RUNC_GO_DIR/go" GOCACHE="$RUNC_GO_DIR/go/cache" GOMODCACHE="$RUNC_GO_DIR/go/mod"
    GOTOOLCHAIN=local GOFLAGS="-buildvcs=false" CGO_ENABLED=1)
RUNC_GO_BIN="$RUNC_GO_DIR/$RUNC_GO_VERSION/runc"

# ensure_runc_go — make $RUNC_GO_BIN: runc $RUNC_GO_VERSION with seccomp, as upstream builds it.
ensure_runc_go() {
    local dir="$RUNC_GO_DIR/$RUNC_GO_VERSION" build_log="$LOG_DIR/runc-go-build.log"
    [ -x "$RUNC_GO_BIN" ] && return 0
    command -v go >/dev/null || die "go is not installed (needed to build runc $RUNC_GO_VERSION)"
    pkg-config --exists libseccomp 2>/dev/null ||
        die "libseccomp's headers are missing (apt-get install libseccomp-dev; needed to build runc $RUNC_GO_VERSION)"
    mkdir -p "$LOG_DIR" "$RUNC_GO_DIR"
    log "building runc $RUNC_GO_VERSION from $RUNC_GO_MODULE (go module proxy, cgo + libseccomp; log $build_log)"
    rm -rf "$dir.tmp"
    mkdir -p "$dir.tmp"
    # The version runc reports, as upstream's Makefile sets it.
    env "${RUNC_GOENV[@]}" GOBIN="$dir.tmp" nice -n 10 go install -trimpath -tags "seccomp urfave_cli_no_docs" \
        -ldflags "-X main.version=${RUNC_GO_VERSION#v}" "$RUNC_GO_MODULE@$RUNC_GO_VERSION" >"$build_log" 2>&1 ||
        die "building runc $RUNC_GO_VERSION failed; see $build_log"
    "$dir.tmp/runc" --version | grep -q "^runc version ${RUNC_GO_VERSION#v}$" ||
        die "the runc built in $dir.tmp does not run or reports another version: $("$dir.tmp/runc" --version 2>&1 | head -n 1)"
    "$dir.tmp/runc" --version | grep -q '^libseccomp: ' || die "the runc built in $dir.tmp has no seccomp support"
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
    log "built runc $RUNC_GO_VERSION into $dir"
}

# --- Go wrapper modules ----------------------------------------------------------------------
# A wrapper module is a module outside the repository that requires the module we build and
# fixes what Go ignores in a dependency's go.mod (its replaces); its tools.go imports what is
# built, so that `go mod tidy` keeps their dependencies. Generated once: callers skip it while
# DIR/.tidy-done (written after a finished tidy) is there.

# go_wrapper_module [--go-sum FILE] GO DIR LOG WHAT IMPORT... < GO.MOD — (re)write DIR: go.mod
# from stdin (FILE copied as go.sum: a head start for the tidy), a tools.go that "pins WHAT"
# and imports each IMPORT; then `GO mod tidy` (GO: a function such as k8s_go; output in LOG).
go_wrapper_module() {
    local go_sum=""
    if [ "$1" = --go-sum ]; then go_sum="$2"; shift 2; fi
    local go="$1" dir="$2" log_file="$3" what="$4"
    shift 4
    rm -rf "$dir"
    mkdir -p "$dir"
    cat >"$dir/go.mod"
    [ -z "$go_sum" ] || cp "$go_sum" "$dir/go.sum"
    {
        echo "//go:build tools"
        echo
        echo "// Package tools pins $what (go mod tidy keeps their deps)."
        echo "package tools"
        echo
        echo "import ("
        printf '\t_ "%s"\n' "$@"
        echo ")"
    } >"$dir/tools.go"
    log "running go mod tidy in $dir (log $log_file)"
    (cd "$dir" && VERBOSE_LOG="$log_file" quietly "$go" mod tidy) ||
        die "go mod tidy in $dir failed; see $log_file"
    touch "$dir/.tidy-done"
}

# go_wrapper_build GO DIR LOG OUT PKG GOCMD [FLAG...] — `GO GOCMD FLAG... -o OUT PKG` in the
# wrapper module DIR (output in LOG), through OUT.tmp: a failed build leaves no OUT.
go_wrapper_build() {
    local go="$1" dir="$2" log_file="$3" out="$4" pkg="$5"
    shift 5
    rm -f "$out.tmp"
    (cd "$dir" && VERBOSE_LOG="$log_file" quietly "$go" "$@" -o "$out.tmp" "$pkg") ||
        die "building $(basename "$out") failed; see $log_file"
    mv -f "$out.tmp" "$out"
}

# --- Kubernetes from its Go module (hack/cluster.sh builds, hack/e2e.sh builds on it) ---------
k8s_go() { env "${K8S_GOENV[@]}" nice -n "$K8S_GO_NICE" go "$@"; }

# k8s_built NAME — $K8S_BIN_DIR/NAME is there and reports the pinned version.
k8s_built() {
    [ -x "$K8S_BIN_DIR/$1" ] || return 1
    case "$1" in
        kubeadm) [ "$("$K8S_BIN_DIR/$1" version -o short 2>/dev/null)" = "$K8S_VERSION" ] ;;
        *) [ "$("$K8S_BIN_DIR/$1" --version 2>/dev/null)" = "Kubernetes $K8S_VERSION" ] ;;
    esac
}

# k8s_ldflags — the linker flags of a Kubernetes binary: without the -X flags /version says
# v0.0.0-master.
k8s_ldflags() {
    local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
    ldflags+=" -X k8s.io/component-base/version.gitMajor=$(cut -d. -f1 <<<"${K8S_VERSION#v}")"
    ldflags+=" -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION")"
    ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
    echo "$ldflags"
}

# k8s_wrapper — $K8S_WRAPPER_DIR, the wrapper module that requires k8s.io/kubernetes at the
# pinned version. Its go.mod pins every staging module at v0.0.0 with `=> ./staging/...`
# replaces, which Go ignores in a dependency: the wrapper replaces each of them with the
# staging module's published release instead. tools.go imports every command we may build
# (K8S_COMMANDS), so one tidy serves them all; a wrapper made before a command joined the list
# is made again.
K8S_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubeadm)
k8s_wrapper() {
    local gomod replaces n cmd fresh=1
    for cmd in "${K8S_COMMANDS[@]}"; do
        grep -qF "\"$K8S_MODULE/cmd/$cmd\"" "$K8S_WRAPPER_DIR/tools.go" 2>/dev/null || fresh=0
    done
    [ "$fresh" = 1 ] && [ -f "$K8S_WRAPPER_DIR/.tidy-done" ] && return 0
    gomod="$(k8s_go mod download -json "$K8S_MODULE@$K8S_VERSION" 2>>"$K8S_BUILD_LOG" | jq -r '.GoMod // empty')" ||
        die "go mod download $K8S_MODULE@$K8S_VERSION failed; see $K8S_BUILD_LOG"
    [ -s "$gomod" ] || die "go mod download gave no go.mod for $K8S_MODULE@$K8S_VERSION; see $K8S_BUILD_LOG"
    replaces="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/src/k8s\.io/.*#\t\1 => \1 '"$K8S_STAGING_VERSION"'#p' "$gomod")"
    n="$(grep -c . <<<"$replaces" || true)"
    [ "$n" -gt 0 ] || die "no staging replaces found in $gomod"
    log "generating the wrapper module for $K8S_MODULE $K8S_VERSION in $K8S_WRAPPER_DIR ($n staging replaces)"
    go_wrapper_module k8s_go "$K8S_WRAPPER_DIR" "$K8S_BUILD_LOG" "the commands hack/cluster.sh builds" \
        "${K8S_COMMANDS[@]/#/$K8S_MODULE/cmd/}" <<EOF
// Generated by hack/cluster.sh: builds $K8S_MODULE $K8S_VERSION's commands. Rewritten when missing.
module crilet.dev/k8s-build

$(# The go line and the godebug settings (one line or a block) of the upstream module.
    awk '/^go [0-9]/' "$gomod"
    awk '/^godebug \(/ {b=1} b {print} b && /^\)/ {b=0; next} /^godebug [^(]/ {print}' "$gomod")

require $K8S_MODULE $K8S_VERSION

replace (
$replaces
)
EOF
}

# build_k8s CMD... — build each of Kubernetes' commands CMD (cmd/CMD) not yet built at the
# pinned version into $K8S_BIN_DIR, through $K8S_WRAPPER_DIR.
build_k8s() {
    local cmd todo=() t0 t ldflags
    for cmd in "$@"; do k8s_built "$cmd" || todo+=("$cmd"); done
    if [ "${#todo[@]}" = 0 ]; then
        log "Kubernetes $K8S_VERSION already built: $* ($K8S_BIN_DIR)"
        return 0
    fi
    command -v go >/dev/null || die "go is not installed (needed to build Kubernetes)"
    command -v jq >/dev/null || die "jq is not installed (run hack/setup.sh)"
    mkdir -p "$LOG_DIR" "$K8S_BIN_DIR"
    printf '\n[%s] building %s\n' "$(date +%H:%M:%S)" "${todo[*]}" >>"$K8S_BUILD_LOG"
    t0=$SECONDS
    k8s_wrapper
    ldflags="$(k8s_ldflags)"
    for cmd in "${todo[@]}"; do
        log "building $cmd $K8S_VERSION (log $K8S_BUILD_LOG$([ "$cmd" = kube-apiserver ] && echo '; cold: 8-17 min on 2 cores'))"
        t=$SECONDS
        go_wrapper_build k8s_go "$K8S_WRAPPER_DIR" "$K8S_BUILD_LOG" "$K8S_BIN_DIR/$cmd" "$K8S_MODULE/cmd/$cmd" \
            build -trimpath -tags selinux,notest -ldflags "$ldflags"
        k8s_built "$cmd" ||
            die "$K8S_BIN_DIR/$cmd does not report Kubernetes $K8S_VERSION: $("$K8S_BIN_DIR/$cmd" --version 2>&1 | head -n1)"
        log "built $cmd $K8S_VERSION in $((SECONDS - t))s"
    done
    log "Kubernetes $K8S_VERSION built in $((SECONDS - t0))s: ${todo[*]} ($K8S_BIN_DIR)"
}

# --- metrics-server from its Go module (hack/cluster.sh metrics-server) ------------------------
# sigs.k8s.io/metrics-server, pinned (v0.8.0; v0.9.0 is not to be used here), built like the
# control plane: a wrapper module outside the repo (the module has no replaces; its go.sum is
# copied as a head start and tools.go pins the command), Go's caches shared with Kubernetes'
# ($K8S_GOENV), CGO off, the version in k8s.io/client-go/pkg/version as upstream's Makefile sets
# it (`metrics-server --version` prints it). A binary that reports the pinned version is not
# rebuilt.
METRICS_SERVER_VERSION=v0.8.0
METRICS_SERVER_MODULE=sigs.k8s.io/metrics-server
METRICS_SERVER_DIR="$K8S_DIR/metrics-server-$METRICS_SERVER_VERSION"
METRICS_SERVER_BIN="$METRICS_SERVER_DIR/bin/metrics-server"
METRICS_SERVER_WRAPPER_DIR="$METRICS_SERVER_DIR/wrapper"
METRICS_SERVER_BUILD_LOG="$LOG_DIR/metrics-server-build.log"

metrics_server_built() {
    [ -x "$METRICS_SERVER_BIN" ] && [ "$("$METRICS_SERVER_BIN" --version 2>/dev/null)" = "$METRICS_SERVER_VERSION" ]
}

# build_metrics_server — $METRICS_SERVER_BIN at $METRICS_SERVER_VERSION.
build_metrics_server() {
    local info dir t0=$SECONDS ldflags
    if metrics_server_built; then
        log "metrics-server $METRICS_SERVER_VERSION already built ($METRICS_SERVER_BIN)"
        return 0
    fi
    command -v go >/dev/null || die "go is not installed (needed to build metrics-server)"
    command -v jq >/dev/null || die "jq is not installed (run hack/setup.sh)"
    mkdir -p "$LOG_DIR" "$(dirname "$METRICS_SERVER_BIN")"
    printf '\n[%s] building metrics-server %s\n' "$(date +%H:%M:%S)" "$METRICS_SERVER_VERSION" >>"$METRICS_SERVER_BUILD_LOG"
    if [ ! -f "$METRICS_SERVER_WRAPPER_DIR/.tidy-done" ]; then
        info="$(k8s_go mod download -json "$METRICS_SERVER_MODULE@$METRICS_SERVER_VERSION" 2>>"$METRICS_SERVER_BUILD_LOG")" ||
            die "go mod download $METRICS_SERVER_MODULE@$METRICS_SERVER_VERSION failed; see $METRICS_SERVER_BUILD_LOG"
        dir="$(jq -r '.Dir // empty' <<<"$info")"
        [ -s "$dir/go.mod" ] || die "go mod download gave no module directory for $METRICS_SERVER_MODULE@$METRICS_SERVER_VERSION"
        log "generating the wrapper module for $METRICS_SERVER_MODULE $METRICS_SERVER_VERSION in $METRICS_SERVER_WRAPPER_DIR"
        go_wrapper_module --go-sum "$dir/go.sum" k8s_go "$METRICS_SERVER_WRAPPER_DIR" "$METRICS_SERVER_BUILD_LOG" \
            "the command hack/cluster.sh metrics-server runs" "$METRICS_SERVER_MODULE/cmd/metrics-server" <<EOF
// Generated by hack/lib.sh build_metrics_server. Rewritten when missing.
module crilet.dev/metrics-server-build

$(awk '/^go [0-9]/' "$dir/go.mod")

require $METRICS_SERVER_MODULE $METRICS_SERVER_VERSION
EOF
    fi
    ldflags="-s -w -X k8s.io/client-go/pkg/version.gitVersion=$METRICS_SERVER_VERSION"
    ldflags+=" -X k8s.io/client-go/pkg/version.gitTreeState=clean"
    log "building metrics-server $METRICS_SERVER_VERSION (log $METRICS_SERVER_BUILD_LOG)"
    go_wrapper_build k8s_go "$METRICS_SERVER_WRAPPER_DIR" "$METRICS_SERVER_BUILD_LOG" "$METRICS_SERVER_BIN" \
        "$METRICS_SERVER_MODULE/cmd/metrics-server" build -trimpath -ldflags "$ldflags"
    metrics_server_built ||
        die "$METRICS_SERVER_BIN does not report $METRICS_SERVER_VERSION: $("$METRICS_SERVER_BIN" --version 2>&1 | head -n1)"
    log "built metrics-server $METRICS_SERVER_VERSION in $((SECONDS - t0))s ($METRICS_SERVER_BIN)"
}

# check_prerequisites — what demo.sh and test.sh need before they install or start anything:
# root, Debian 12 or newer, and a Rust toolchain (cargo, rustc >= the crate's rust-version).
check_prerequisites() {
    require_root
    local id version_id
    id="$(. /etc/os-release 2>/dev/null && echo "${ID:-}")"
    version_id="$(. /etc/os-release 2>/dev/null && echo "${VERSION_ID:-0}")"
    if [ "$id" != debian ] || [ "${version_id%%.*}" -lt 12 ] 2>/dev/null; then
        die "needs Debian 12 (bookworm) or newer; this is ${id:-unknown} ${version_id:-}"
    fi
    local need have
    need="$(awk -F'"' '/^rust-version/ {print $2; exit}' "$REPO_ROOT/Cargo.toml")"
    command -v cargo >/dev/null 2>&1 && command -v rustc >/dev/null 2>&1 ||
        die "needs a Rust toolchain (cargo and rustc $need or newer) on PATH: install it with rustup (https://rustup.rs), then open a new shell or run: . \$HOME/.cargo/env"
    have="$(rustc --version | awk '{print $2}')"
    if ! printf '%s\n%s\n' "$need" "$have" | sort -V -C; then
        die "rustc $have is older than the $need this crate needs: rustup update stable"
    fi
}
