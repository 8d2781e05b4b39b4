#!/usr/bin/env bash
# hack/critest.sh — run the CRI conformance suite (critest, cri-tools v1.37.0) against the
# containerd builds crilet supports, on a DEDICATED containerd that nothing else uses.
#
# Usage: hack/critest.sh [--runtime 2.1|1.6|2.3|both] [--verbose]     (as root)
#   --runtime  which containerd: 2.1 (Debian sid's, the private prefix of hack/lib.sh's
#              ensure_containerd_sid), 1.6 (bookworm's /usr/bin), 2.3 (built from its Go
#              module by lib.sh's ensure_containerd_go) or both (default: 2.1, then 1.6)
#   --verbose  also stream critest's output to the terminal (it always goes to the log)
# Exit status: 0 when every failure is listed (xfail or flaky) in hack/critest-skips.txt,
# 1 when some spec failed that is not (or a step failed), 2 on bad usage.
#
# What it does, one line of output per step:
#   1. builds critest (`go test -c` of the pinned sigs.k8s.io/cri-tools module from the Go
#      module proxy; crictl too, for the cleanup) into /var/lib/crilet-dev/critest/v1.37.0,
#      with GOPATH/GOCACHE/GOMODCACHE under /var/lib/crilet-dev/critest/go — skipped when built;
#   2. starts the local registry (hack/lib.sh's start_registry) unless it runs, and makes it
#      serve the stand-in images under their upstream paths (hack/critest-images.sh);
#   3. per runtime: writes a private containerd config (root, state, socket
#      /run/crilet-dev/critest/containerd.sock, opt, runc root, CNI network crilet-ct on bridge
#      crilet-ct0 / 10.88.78.0/24 with host-local leases in its state, netns under its state,
#      registry.k8s.io, k8s.gcr.io, gcr.io, localhost:5099 and every other registry mirrored to
#      127.0.0.1:5099 only; on 2.1 NRI on a private socket for critest's NRI specs), adds
#      iptables chain CRILET-CT-GUARD (pods reach nothing outside their subnet), starts that
#      containerd, runs critest serially with a JUnit report and the skip list
#      (hack/critest-skips.txt, read by hack/critest-report.py), prints passed/failed/skipped,
#      then removes everything again;
#   4. prints one summary line per runtime.
# Never touches crilet-dev's containerd (/run/crilet-dev/containerd, containerd-2.1/1.6 dirs),
# its bridge crilet0 or chain CRILET-DEV-GUARD; one run at a time (lock
# /run/crilet-dev/critest.lock): the hostPort specs need host ports 12000-12003.
# Logs: /var/lib/crilet-dev/logs/critest-{build,images,containerd-RT,RT}.log, the JUnit report
# critest-RT.junit.xml and every spec with its status and reason in critest-RT.summary.txt.
# Cleanup (trap on EXIT, also after Ctrl-C): pods and containers via CRI (crictl rmp -fa) and
# ctr, that containerd (by pid), leftover shims of its socket (by pid), its netns and mounts,
# bridge, guard chain, portmap rules of its network, host-local leases, its root, state and
# config; the System V shm segments the HostIpc specs leak (only 1 MiB unattached ones
# created during the run); what the run created and left empty: portmap's shared nat chains,
# iptables tables, the /k8s.io cgroups; ip_forward if it was 0; the registry if this script
# started it (and crilet-dev's environment has not been set up meanwhile). Kept as caches:
# the critest/crictl build, Go's caches, the busybox package and the image builds.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# For CRITEST_DIR (the cache) and CT_GOENV (Go's private caches); the images are built by
# running it (below).
. "$HACK_DIR/critest-images.sh"

CRITEST_VERSION=v1.37.0
CRITEST_MODULE=sigs.k8s.io/cri-tools
CT_BIN_DIR="$CRITEST_DIR/$CRITEST_VERSION"
CT_SKIPS="$HACK_DIR/critest-skips.txt"
CT_REPORT="$HACK_DIR/critest-report.py"

CT_RUN_DIR="$CRILET_RUN/critest"
CT_LOCK="$CRILET_RUN/critest.lock"
CT_SOCK="$CT_RUN_DIR/containerd.sock"
CT_PIDFILE="$CT_RUN_DIR/containerd.pid"
CT_RUNC_ROOT="$CT_RUN_DIR/runc"
CT_IPAM_DIR="$CT_RUN_DIR/cni-ipam"
CT_TMP="$CT_RUN_DIR/tmp"
CT_NRI_SOCK="$CT_RUN_DIR/nri.sock"
CT_CERTS_D="$CRITEST_DIR/certs.d"
CT_CNI_CONF_DIR="$CRITEST_DIR/cni/net.d"
CT_NETWORK=crilet-ct
CT_BRIDGE=crilet-ct0
CT_CIDR=10.88.78.0/24
CT_GUARD=CRILET-CT-GUARD
CT_HOST_PORTS=(12000 12001 12002 12003)
# The sandbox image: hack/setup.sh's catatonit pause image in the local registry.
CT_SANDBOX_IMAGE="$IMAGE_PAUSE"
# portmap's shared nat chains: removed at the end only if this run created them and no
# hostPort rule of anyone is left in them.
CT_PORTMAP_CHAINS=("${PORTMAP_CHAINS[@]}")

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }

RUNTIMES=(2.1 1.6)
VERBOSE=0
while [ $# -gt 0 ]; do
    case "$1" in
        --runtime) [ $# -ge 2 ] || usage; set -- "--runtime=$2" "${@:3}"; continue ;;
        --runtime=2 | --runtime=2.1) RUNTIMES=(2.1) ;;
        --runtime=1.6) RUNTIMES=(1.6) ;;
        --runtime=2.3) RUNTIMES=(2.3) ;;
        --runtime=both) RUNTIMES=(2.1 1.6) ;;
        -v | --verbose) VERBOSE=1 ;;
        -h | --help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage ;;
    esac
    shift
done

# ------------------------------------------------------------------------------------------
# Per-runtime layout (ct_select RUNTIME)
# ------------------------------------------------------------------------------------------
CT_RT=""
ct_select() {
    CT_RT="$1"
    case "$CT_RT" in
        1.6) CT_CTR_BIN_DIR=/usr/bin ;;
        2.3) CT_CTR_BIN_DIR="$CONTAINERD_GO_DIR/$CONTAINERD_GO_VERSION/bin" ;;
        *) CT_CTR_BIN_DIR="$CONTAINERD_SID_DIR/current/usr/bin" ;;
    esac
    CT_CONF_DIR="$CRITEST_DIR/containerd-$CT_RT"
    CT_CONFIG="$CT_CONF_DIR/config.toml"
    CT_ROOT="$CT_CONF_DIR/root"
    CT_OPT="$CT_CONF_DIR/opt"
    CT_NRI_DIR="$CT_CONF_DIR/nri"
    CT_STATE="$CT_RUN_DIR/state-$CT_RT"
    CT_CTRD_LOG="$LOG_DIR/critest-containerd-$CT_RT.log"
    CT_LOG="$LOG_DIR/critest-$CT_RT.log"
    CT_JUNIT="$LOG_DIR/critest-$CT_RT.junit.xml"
    CT_SUMMARY="$LOG_DIR/critest-$CT_RT.summary.txt"
}

ct_ctr() { "$CT_CTR_BIN_DIR/ctr" --address "$CT_SOCK" "$@"; }
ct_ctrk() { "$CT_CTR_BIN_DIR/ctr" --address "$CT_SOCK" -n k8s.io "$@"; }
# crictl (built with critest) against critest's containerd, for the cleanup.
CT_CRICTL=("$CT_BIN_DIR/crictl" --runtime-endpoint "unix://$CT_SOCK" --image-endpoint "unix://$CT_SOCK" --timeout 30s)
ct_crictl() { "${CT_CRICTL[@]}" "$@"; }
ct_pid() { live_pid "$CT_PIDFILE" "$CT_CONFIG"; }
ct_answers() { ct_ctr version >/dev/null 2>&1; }

# ------------------------------------------------------------------------------------------
# critest and crictl from the pinned module
# ------------------------------------------------------------------------------------------
build_critest() {
    if [ -x "$CT_BIN_DIR/critest" ] && [ -x "$CT_BIN_DIR/crictl" ]; then
        log "critest $CRITEST_VERSION already built ($CT_BIN_DIR)"
        return 0
    fi
    command -v go >/dev/null || die "go is not installed (needed to build critest)"
    local build_log="$LOG_DIR/critest-build.log" dir ldflags="-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRITEST_VERSION"
    log "building critest $CRITEST_VERSION from $CRITEST_MODULE (go module proxy; log $build_log)"
    : >"$build_log"
    # The module is extracted (read-only) into the private module cache and built there:
    # critest is a test binary (`go test -c`, as cri-tools' Makefile does).
    dir="$(env "${CT_GOENV[@]}" go mod download -json "$CRITEST_MODULE@$CRITEST_VERSION" 2>>"$build_log" | jq -r '.Dir // empty')" ||
        die "go mod download $CRITEST_MODULE@$CRITEST_VERSION failed; see $build_log"
    [ -d "$dir/cmd/critest" ] || die "no cmd/critest in $dir; see $build_log"
    mkdir -p "$CT_BIN_DIR"
    (
        cd "$dir"
        env "${CT_GOENV[@]}" go test -c -o "$CT_BIN_DIR/critest.tmp" -ldflags "$ldflags" ./cmd/critest &&
            env "${CT_GOENV[@]}" go build -o "$CT_BIN_DIR/crictl.tmp" -ldflags "$ldflags" ./cmd/crictl
    ) >>"$build_log" 2>&1 || die "building critest failed; see $build_log"
    mv -f "$CT_BIN_DIR/critest.tmp" "$CT_BIN_DIR/critest"
    mv -f "$CT_BIN_DIR/crictl.tmp" "$CT_BIN_DIR/crictl"
    log "built $("$CT_BIN_DIR/critest" --version 2>/dev/null | head -n1) and crictl into $CT_BIN_DIR"
}

# ------------------------------------------------------------------------------------------
# Config files
# ------------------------------------------------------------------------------------------
# hack/lib.sh's containerd_config with critest's paths, netns under its state dir, and (2.x)
# NRI enabled on a private socket so that critest's NRI specs can run (--nri-socket).
ct_config() {
    local version=3
    [ "$CT_RT" = 1.6 ] && version=2
    containerd_config "$version" \
        "header=# Generated by hack/critest.sh for critest's private containerd $CT_RT — rewritten every run." \
        "root=$CT_ROOT" "state=$CT_STATE" "sock=$CT_SOCK" "opt=$CT_OPT" "sandbox=$CT_SANDBOX_IMAGE" \
        "runc_root=$CT_RUNC_ROOT" "cni_conf_dir=$CT_CNI_CONF_DIR" "certs_d=$CT_CERTS_D" netns_in_state=true \
        "nri_socket=$CT_NRI_SOCK" "nri_dir=$CT_NRI_DIR"
}

ct_conflist() {
    cat <<JSON
{
  "cniVersion": "1.0.0",
  "name": "$CT_NETWORK",
  "plugins": [
    {"type": "bridge", "bridge": "$CT_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$CT_IPAM_DIR",
              "ranges": [[{"subnet": "$CT_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
}

# Every registry critest names resolves to the local registry and to nothing else: the
# mirror is the only host, and `server` is the local registry too, so a miss is a miss.
# `_default` covers any other registry name (containerd >= 1.7 reads it; harmless on 1.6).
ct_hosts_toml() {
    cat <<EOF
# Generated by hack/critest.sh: $1 is served by the local registry only (offline).
server = "http://$REGISTRY_LISTEN"

[host."http://$REGISTRY_LISTEN"]
  capabilities = ["pull", "resolve"]
EOF
}

ct_write_config() {
    local host
    rm -rf "$CT_CONF_DIR" "$CT_CERTS_D" "$CT_CNI_CONF_DIR"
    mkdir -p "$CT_CONF_DIR" "$CT_ROOT" "$CT_OPT" "$CT_NRI_DIR/plugins" "$CT_NRI_DIR/conf.d" "$CT_STATE" \
        "$CT_RUNC_ROOT" "$CT_IPAM_DIR" "$CT_TMP" "$CT_CNI_CONF_DIR" "$LOG_DIR"
    ct_config >"$CT_CONFIG"
    for host in registry.k8s.io k8s.gcr.io gcr.io "$REGISTRY" _default; do
        mkdir -p "$CT_CERTS_D/$host"
        ct_hosts_toml "$host" >"$CT_CERTS_D/$host/hosts.toml"
    done
    ct_conflist | jq . >"$CT_CNI_CONF_DIR/10-$CT_NETWORK.conflist"
}

# ------------------------------------------------------------------------------------------
# Host state: guard chain, shm segments, portmap chains, ip_forward
# ------------------------------------------------------------------------------------------
ct_guard_install() {
    iptables -w -N "$CT_GUARD" 2>/dev/null || true
    iptables -w -F "$CT_GUARD"
    iptables -w -A "$CT_GUARD" -s "$CT_CIDR" -d "$CT_CIDR" -j RETURN
    iptables -w -A "$CT_GUARD" -s "$CT_CIDR" -j DROP
    iptables -w -C FORWARD -j "$CT_GUARD" 2>/dev/null || iptables -w -I FORWARD 1 -j "$CT_GUARD"
}

ct_guard_remove() {
    iptables -w -S "$CT_GUARD" >/dev/null 2>&1 || return 0
    while iptables -w -D FORWARD -j "$CT_GUARD" 2>/dev/null; do :; done
    iptables -w -F "$CT_GUARD" && iptables -w -X "$CT_GUARD" || warn "could not remove iptables chain $CT_GUARD"
}

# shm_ids — "ID BYTES NATTCH" of every System V shared memory segment on the host.
shm_ids() { ipcs -m 2>/dev/null | awk '$1 ~ /^0x/ {print $2, $5, $6}'; }
SHM_BEFORE=""
SHM_RECORDED=0

# remove_leaked_shm — the HostIpc specs run `ipcmk -M 1048576` on the host and never remove
# the segment: remove the 1 MiB, unattached segments that did not exist before the run.
remove_leaked_shm() {
    local id bytes nattch n=0
    while read -r id bytes nattch; do
        [ -n "$id" ] || continue
        grep -qx "$id" <<<"$SHM_BEFORE" && continue
        [ "$bytes" = 1048576 ] && [ "$nattch" = 0 ] || continue
        ipcrm -m "$id" 2>/dev/null && n=$((n + 1))
    done < <(shm_ids)
    echo "$n"
}

# Rules portmap added for our network (their comment names it), and the per-pod chains they
# jump to: only left behind when a pod was removed without CNI DEL.
remove_portmap_rules() {
    local rule chain
    iptables -w -t nat -S CNI-HOSTPORT-DNAT >/dev/null 2>&1 || return 0
    while read -r rule; do
        chain="$(sed -n 's/.* -j \(CNI-DN-[0-9a-f]*\).*/\1/p' <<<"$rule")"
        eval "iptables -w -t nat ${rule/-A /-D }" 2>/dev/null || true
        if [ -n "$chain" ]; then
            iptables -w -t nat -F "$chain" 2>/dev/null && iptables -w -t nat -X "$chain" 2>/dev/null || true
        fi
    done < <(iptables -w -t nat -S CNI-HOSTPORT-DNAT 2>/dev/null | grep -F "name: \\\"$CT_NETWORK\\\"" || true)
}

PORTMAP_CHAINS_BEFORE=""
remove_portmap_chains_if_ours() {
    local chain rule base
    [ -z "$PORTMAP_CHAINS_BEFORE" ] || return 0
    iptables -w -t nat -S CNI-HOSTPORT-DNAT >/dev/null 2>&1 || return 0
    # Anyone's hostPort rule still there (crilet-dev's pods use portmap too): leave them.
    [ "$(iptables -w -t nat -S CNI-HOSTPORT-DNAT | grep -c '^-A')" = 0 ] || return 0
    for chain in "${CT_PORTMAP_CHAINS[@]}"; do
        for base in PREROUTING OUTPUT POSTROUTING; do
            while read -r rule; do
                eval "iptables -w -t nat ${rule/-A /-D }" 2>/dev/null || true
            done < <(iptables -w -t nat -S "$base" 2>/dev/null | grep -- "-j $chain\$" || true)
        done
    done
    for chain in "${CT_PORTMAP_CHAINS[@]}"; do
        iptables -w -t nat -F "$chain" 2>/dev/null || true
        iptables -w -t nat -X "$chain" 2>/dev/null || true
    done
}

IP_FORWARD_BEFORE=""

# iptables tables (nf_tables backend) that exist before the run: portmap and our guard may
# create ip/ip6 nat or filter; a table that is new and holds nothing but its built-in
# chains at the end is deleted again.
NFT_TABLES_BEFORE=""
nft_tables() { nft list tables 2>/dev/null | awk '$1 == "table" {print $2, $3}'; }
remove_new_empty_tables() {
    command -v nft >/dev/null || return 0
    local family table cmd
    while read -r family table; do
        [ -n "$family" ] || continue
        grep -qx "$family $table" <<<"$NFT_TABLES_BEFORE" && continue
        case "$family" in ip) cmd=iptables ;; ip6) cmd=ip6tables ;; *) continue ;; esac
        case "$table" in filter | nat | mangle | raw) ;; *) continue ;; esac
        # Only built-in chains with their policies (-P), no chain (-N) or rule (-A) of anyone.
        [ -z "$("$cmd" -w -t "$table" -S 2>/dev/null | grep -v '^-P ')" ] || continue
        nft delete table "$family" "$table" 2>/dev/null || true
    done < <(nft_tables)
}

# containerd's cgroupfs driver puts pods without a cgroup parent under /k8s.io in every
# controller; those directories outlive the containers. Removed if new and empty.
CGROUPS_BEFORE=""
k8s_cgroups() { ls -d /sys/fs/cgroup/*/k8s.io /sys/fs/cgroup/k8s.io 2>/dev/null || true; }
remove_new_cgroups() {
    local d
    for d in $(k8s_cgroups); do
        grep -qx "$d" <<<"$CGROUPS_BEFORE" || rmdir "$d" 2>/dev/null || true
    done
}

# ------------------------------------------------------------------------------------------
# containerd (critest's own)
# ------------------------------------------------------------------------------------------
ct_start_containerd() {
    [ -x "$CT_CTR_BIN_DIR/containerd" ] || die "no containerd in $CT_CTR_BIN_DIR"
    : >"$CT_CTRD_LOG"
    # The runtime's bin dir first on PATH: containerd starts the shim found on PATH, and
    # 2.1 must not get the system's 1.6 shim. runc is bookworm's, further down PATH.
    # 9>&-: the daemon (and its shims) must not inherit the run's lock.
    PATH="$CT_CTR_BIN_DIR:$PATH" start_daemon "$CT_PIDFILE" "$CT_CTRD_LOG" \
        "$CT_CTR_BIN_DIR/containerd" --config "$CT_CONFIG" 9>&-
    if ! wait_for 60 "critest's containerd to answer on $CT_SOCK" ct_answers; then
        tail -n 20 "$CT_CTRD_LOG" >&2 || true
        die "containerd $CT_RT (pid $(cat "$CT_PIDFILE")) did not come up; see $CT_CTRD_LOG"
    fi
}

# shim_pids — shims serving our socket (their argv names it: -address $CT_SOCK).
shim_pids() {
    local d pid
    for d in /proc/[0-9]*; do
        pid="${d#/proc/}"
        case "$(pid_cmdline "$pid")" in
            *containerd-shim*"-address $CT_SOCK"*) echo "$pid" ;;
        esac
    done
}

# ct_remove_pods — every pod and container of critest's containerd: through the CRI first
# (StopPodSandbox does the CNI DEL and removes the netns), then whatever is left with ctr.
ct_remove_pods() {
    local ids id
    if [ -x "$CT_BIN_DIR/crictl" ]; then
        timeout 120 "${CT_CRICTL[@]}" rmp -fa >/dev/null 2>&1 || true
        timeout 60 "${CT_CRICTL[@]}" rm -fa >/dev/null 2>&1 || true
    fi
    ids="$(ct_ctrk containers ls -q 2>/dev/null || true)"
    [ -n "$ids" ] || return 0
    echo "removing $(wc -w <<<"$ids") containers with ctr" >>"$CT_CTRD_LOG"
    for id in $ids; do ct_ctrk tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    sleep 1
    for id in $ids; do
        ct_ctrk tasks delete -f "$id" >/dev/null 2>&1 || true
        ct_ctrk containers delete "$id" >/dev/null 2>&1 || true
    done
}

# umount_under DIR... — every mount below the given directories, deepest first.
umount_under() {
    local dir mnt
    for dir in "$@"; do
        awk -v p="$dir/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r |
            while read -r mnt; do umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; done
    done
}

mounts_under() {
    local dir
    for dir in "$@"; do
        awk -v p="$dir/" 'index($5, p) == 1 {found=1} END {exit !found}' /proc/self/mountinfo && return 0
    done
    return 1
}

# ct_cleanup_runtime — leave nothing of the selected runtime's run behind. Idempotent; also
# cleans the remains of an interrupted earlier run.
ct_cleanup_runtime() {
    local pid
    adopt "$CT_PIDFILE" containerd "$CT_CONFIG" >/dev/null 2>&1 || true
    if ! ct_pid >/dev/null && [ -f "$CT_CONFIG" ] && [ -d "$CT_ROOT" ] && [ -x "$CT_CTR_BIN_DIR/containerd" ] &&
        [ -n "$(ls -A "$CT_ROOT" 2>/dev/null)" ]; then
        # Leftovers of an interrupted run: containers can only be removed through containerd.
        ( ct_start_containerd ) >/dev/null 2>&1 || true
    fi
    if ct_pid >/dev/null && ct_answers; then
        ct_remove_pods
    fi
    stop_pid "$CT_PIDFILE" "$CT_CONFIG" "critest's containerd $CT_RT" 20 2>/dev/null
    for pid in $(shim_pids); do
        warn "shim (pid $pid) of critest's containerd outlived it; killing it and its children"
        kill -KILL $(pgrep -P "$pid") "$pid" 2>/dev/null || true
    done
    umount_under "$CT_STATE" "$CT_ROOT" "$CT_TMP" "$CT_RUNC_ROOT"
    ip link show "$CT_BRIDGE" >/dev/null 2>&1 && { ip link delete "$CT_BRIDGE" type bridge || warn "could not delete bridge $CT_BRIDGE"; }
    remove_portmap_rules
    if mounts_under "$CT_STATE" "$CT_ROOT" "$CT_TMP"; then
        warn "mounts remain under $CT_STATE / $CT_ROOT / $CT_TMP; not deleting them"
    else
        rm -rf "$CT_STATE" "$CT_CONF_DIR" "$CT_TMP" "$CT_RUNC_ROOT" "$CT_IPAM_DIR"
    fi
}

# ------------------------------------------------------------------------------------------
# One run
# ------------------------------------------------------------------------------------------
SUMMARY_LINES=()
STATUS=0

run_runtime() {
    local rt="$1" version skips=() re t0 out result rc
    ct_select "$rt"
    case "$rt" in
        2.1) ensure_containerd_sid ;;
        2.3) ensure_containerd_go ;;
        *) [ -x /usr/bin/containerd ] || die "containerd 1.6 (Debian package containerd) is not installed; run hack/setup.sh" ;;
    esac
    version="$("$CT_CTR_BIN_DIR/containerd" --version | awk '{print $3}')"
    ct_cleanup_runtime
    ct_write_config
    ct_guard_install
    ct_start_containerd
    log "containerd $version for critest: pid $(ct_pid) on $CT_SOCK (network $CT_NETWORK, $CT_BRIDGE, $CT_CIDR)"

    out="$(python3 "$CT_REPORT" skips "$CT_SKIPS" "$rt")" || die "cannot read $CT_SKIPS"
    while IFS= read -r re; do [ -z "$re" ] || skips+=("--ginkgo.skip=$re"); done <<<"$out"
    local args=(--runtime-endpoint "unix://$CT_SOCK" --image-endpoint "unix://$CT_SOCK"
        --ginkgo.junit-report="$CT_JUNIT" --ginkgo.no-color --ginkgo.timeout=30m "${skips[@]}")
    if [ "$rt" != 1.6 ]; then args+=(--nri-socket "$CT_NRI_SOCK"); fi
    rm -f "$CT_JUNIT" "$CT_SUMMARY"
    log "running critest $CRITEST_VERSION on containerd $version (${#skips[@]} skip patterns; log $CT_LOG)"
    t0=$SECONDS
    # Serial (no --parallel: even --parallel=1 makes Ginkgo abort). critest's temporary
    # files (log dirs, seccomp profiles, mount-propagation dirs) go to our state dir.
    set +e
    if [ "$VERBOSE" = 1 ]; then
        (cd "$CT_TMP" && TMPDIR="$CT_TMP" "$CT_BIN_DIR/critest" "${args[@]}") 2>&1 | tee "$CT_LOG" >&2
    else
        (cd "$CT_TMP" && TMPDIR="$CT_TMP" "$CT_BIN_DIR/critest" "${args[@]}") >"$CT_LOG" 2>&1
    fi
    set -e
    local secs=$((SECONDS - t0))

    rc=0
    out="$(python3 "$CT_REPORT" report "$CT_SKIPS" "$rt" "$CT_JUNIT" "$CT_SUMMARY")" || rc=$?
    result="$(grep '^RESULT ' <<<"$out" | tail -n1)"
    grep -v '^RESULT ' <<<"$out" >&2 || true
    local passed failed skipped xfail bad
    read -r _ passed failed skipped xfail bad <<<"${result:-RESULT 0 0 0 0 1}"
    local verdict="OK"
    if [ "$rc" != 0 ]; then verdict="FAILED ($bad unexpected)"; STATUS=1; fi
    log "containerd $version: passed $passed, failed $failed ($xfail expected), skipped $skipped — $verdict (${secs}s; $CT_SUMMARY)"
    SUMMARY_LINES+=("critest $CRITEST_VERSION on containerd $rt ($version): $passed passed, $failed failed ($xfail expected), $skipped skipped — $verdict")

    ct_cleanup_runtime
    ct_guard_remove
    local shm
    shm="$(remove_leaked_shm)"
    log "containerd $rt: cleaned up (pods, containerd, netns, $CT_BRIDGE, $CT_GUARD, leases, state; $shm leaked shm segment(s) removed)"
    CT_RT=""
}

# ------------------------------------------------------------------------------------------
REGISTRY_STARTED=0
LOCKED=0

final_cleanup() {
    local rc=$?
    set +e
    if [ -n "$CT_RT" ]; then
        warn "interrupted during the containerd $CT_RT run; cleaning up"
        ct_cleanup_runtime
    fi
    if [ "$LOCKED" = 1 ]; then
        ct_guard_remove
        [ "$SHM_RECORDED" = 0 ] || remove_leaked_shm >/dev/null
        remove_portmap_chains_if_ours
        remove_new_empty_tables
        remove_new_cgroups
        if [ "$IP_FORWARD_BEFORE" = 0 ] && ! ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then
            sysctl -qw net.ipv4.ip_forward=0
        fi
        [ -d "$CT_RUN_DIR" ] && ! mounts_under "$CT_RUN_DIR" && rm -rf "$CT_RUN_DIR"
        rm -rf "$CT_CERTS_D" "$CRITEST_DIR/cni"
        # Stopped only if this run started it and crilet-dev's environment is not set up
        # meanwhile (hack/setup.sh adopts a running registry; it is then theirs).
        if [ "$REGISTRY_STARTED" = 1 ] && [ ! -e "$ENV_FILE" ]; then stop_registry 2>/dev/null; fi
        rm -f "$CT_LOCK"
    fi
    exit "$rc"
}

main() {
    require_root
    local cmd
    for cmd in go jq python3 umoci skopeo iptables ip ipcs ipcrm flock ss; do
        command -v "$cmd" >/dev/null || die "$cmd is not installed (run hack/setup.sh; python3 and go come with the machine)"
    done
    mkdir -p "$CRILET_RUN" "$LOG_DIR" "$CRITEST_DIR"
    exec 9>"$CT_LOCK"
    flock -n 9 || die "another hack/critest.sh run holds $CT_LOCK (the hostPort specs need ports 12000-12003: one run at a time)"
    LOCKED=1
    trap final_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    local port
    for port in "${CT_HOST_PORTS[@]}"; do
        [ -z "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] || die "host port $port is in use; critest's hostPort specs need 12000-12003 free"
    done
    SHM_BEFORE="$(shm_ids | awk '{print $1}')"
    SHM_RECORDED=1
    PORTMAP_CHAINS_BEFORE="$(iptables -w -t nat -S CNI-HOSTPORT-DNAT 2>/dev/null | head -n1 || true)"
    IP_FORWARD_BEFORE="$(sysctl -n net.ipv4.ip_forward)"
    NFT_TABLES_BEFORE="$(nft_tables)"
    CGROUPS_BEFORE="$(k8s_cgroups)"

    build_critest

    if ! registry_answers; then
        [ -f "$REGISTRY_CONFIG" ] || die "no local registry configured ($REGISTRY_CONFIG); run hack/setup.sh once"
        start_registry 2>/dev/null 9>&-
        REGISTRY_STARTED=1
        log "started the local registry (pid $(registry_pid)); it is stopped again at the end"
    fi
    [ -n "$(registry_digest pause 3.10)" ] ||
        die "the registry has no $IMAGE_PAUSE (the sandbox image); run hack/setup.sh once"
    # A process of its own, so that `set -e` holds inside the build.
    if ! bash "$HACK_DIR/critest-images.sh" >"$LOG_DIR/critest-images.log" 2>&1 9>&-; then
        tail -n 20 "$LOG_DIR/critest-images.log" >&2
        die "building the critest images failed; see $LOG_DIR/critest-images.log"
    fi
    log "$(tail -n1 "$LOG_DIR/critest-images.log" | sed 's/^\[hack [0-9:]*\] //')"

    local rt
    # Remains of an interrupted earlier run (either runtime: they share the socket).
    for rt in 2.1 1.6 2.3; do ct_select "$rt"; ct_cleanup_runtime; done
    CT_RT=""
    ct_guard_remove
    for rt in "${RUNTIMES[@]}"; do run_runtime "$rt"; done

    printf '%s\n' "${SUMMARY_LINES[@]}"
    exit "$STATUS"
}

# CRITEST_SH_LIB=1: only define the functions (for debugging: `CRITEST_SH_LIB=1 . hack/critest.sh`).
[ "${CRITEST_SH_LIB:-0}" = 1 ] || main
