#!/usr/bin/env bash
# hack/teardown.sh — stop crilet's test environment and remove every pod it left behind.
#
# Usage: hack/teardown.sh [--all | --keep-registry]
#   (default) stop the crilet started by demo.sh, kill and delete every container and pod
#             sandbox in our containerd's k8s.io namespace (with the CNI teardown the CRI
#             plugin would do: portmap/bridge DEL, netns removal), delete bridge crilet0 and
#             the egress guard, stop our containerd and the registry, and remove the demo
#             agent's pod state and logs (its pods are gone), after unmounting the shared binds
#             crilet makes of its agents' root dirs (mount propagation). Images, the registry's data and
#             the containerd root stay, so the next setup.sh is fast.
#             The control plane of hack/cluster.sh (metrics-server too) is stopped (`cluster.sh down --purge`: its
#             processes by pid file, then its PKI, kubeconfigs, node identities, etcd data, pid
#             files and env file are removed); its binaries and Go build caches
#             (/var/lib/crilet-dev/k8s) are kept. Before that, hack/e2e.sh's node is cleaned
#             up (`e2e.sh clean`: its crilet by pid, its pods, the e2e namespaces, its state).
#   --all     also delete /var/lib/crilet-dev and /run/crilet-dev entirely (the cluster's
#             binaries and build caches with them: the next hack/cluster.sh builds ~10 min).
#   --keep-registry  leave the registry running (setup.sh switching runtimes; critest uses it).
# CRILET_RUNTIME=2.3 hack/teardown.sh tears down only the containerd 2.3 that runs beside the
# main environment (setup.sh): its pods (with their CNI DEL), the daemon, its leftover shims,
# state and env file. The main environment, registry, network and control plane stay. (A
# teardown of the main environment tears a containerd 2.3 beside it down first.)
# Only processes recorded in /run/crilet-dev/*.pid (or running with our private config
# paths) are signalled; the system containerd and foreign network namespaces are left alone.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ALL=0
KEEP_REGISTRY=0
for arg in "$@"; do
    case "$arg" in
        --all) ALL=1 ;;
        --keep-registry) KEEP_REGISTRY=1 ;;
        -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
        *) die "unknown argument: $arg (usage: $0 [--all | --keep-registry])" ;;
    esac
done
require_root
T0=$SECONDS

# ------------------------------------------------------------------------------------------
stop_crilet() {
    adopt "$CRILET_PIDFILE" crilet "$CRILET_SOCK" || true
    # crilet leaves its containers running when it stops (like the kubelet); they are
    # removed below.
    stop_pid "$CRILET_PIDFILE" "$CRILET_SOCK" crilet 15
    rm -f "$CRILET_SOCK"
}

# ------------------------------------------------------------------------------------------
# CNI: what the CRI plugin's StopPodSandbox would do, by hand (see lib.sh).
cni_del() {
    local id="$1" netns="$2" plugin conf type
    [ -e "$netns" ] || netns=""
    # DEL runs the chain in reverse order.
    for plugin in cni_plugin_portmap cni_plugin_bridge; do
        conf="$("$plugin" | jq -c --arg name "$CNI_NETWORK" '. + {cniVersion: "1.0.0", name: $name}')"
        type="$(jq -r .type <<<"$conf")"
        if ! CNI_COMMAND=DEL CNI_CONTAINERID="$id" CNI_NETNS="$netns" CNI_IFNAME=eth0 \
            CNI_PATH="$CNI_BIN_DIR" "$CNI_BIN_DIR/$type" <<<"$conf" >/dev/null; then
            warn "CNI DEL ($type) failed for sandbox ${id:0:12}"
        fi
    done
}

# netns_is_ours NAME — the namespace's interface hangs off our bridge, or holds an address
# leased from our private host-local store. Either is impossible for another runtime's pod.
netns_is_ours() {
    local ns="$1" peer ip
    for peer in $(ip -n "$ns" -o link show 2>/dev/null | sed -n 's/^[0-9]*: [^@]*@if\([0-9]*\):.*/\1/p'); do
        ip -o link show 2>/dev/null | grep -q "^$peer: .* master $CNI_BRIDGE " && return 0
    done
    for ip in $(ip -n "$ns" -4 -o addr show 2>/dev/null | awk '{print $4}' | cut -d/ -f1); do
        [ -e "$CNI_IPAM_DIR/$CNI_NETWORK/$ip" ] && return 0
    done
    return 1
}

delete_netns() {
    local path="$1" name
    name="$(basename "$path")"
    if [ "$(dirname "$path")" = /var/run/netns ] || [ "$(dirname "$path")" = /run/netns ]; then
        ip netns delete "$name" 2>/dev/null || true
    fi
    if [ -e "$path" ]; then
        umount "$path" 2>/dev/null || true
        rm -f "$path" 2>/dev/null || true
    fi
    # Happens when /run/netns was bind-mounted over itself (`ip netns add` does that) after
    # the namespace was mounted: the nsfs mount is then hidden and cannot be reached by path.
    [ ! -e "$path" ] || warn "could not remove network namespace $path"
}

# task_ids — "ID STATUS" of every task in the k8s.io namespace.
task_ids() {
    ctrk tasks ls 2>/dev/null | awk 'NR > 1 {print $1 " " $3}'
}

remove_k8s_containers() {
    local ids sandboxes id info netns cg ctrl
    local -a netns_paths=() cgroups=()
    ids="$(ctrk containers ls -q 2>/dev/null || true)"
    sandboxes="$(ctrk containers ls -q 'labels."io.cri-containerd.kind"==sandbox' 2>/dev/null || true)"
    if [ -z "$ids" ]; then
        log "no containers in our containerd's $K8S_NS namespace"
        return 0
    fi
    log "removing $(wc -w <<<"$ids") containers ($(wc -w <<<"$sandboxes") pod sandboxes) from $K8S_NS"

    # Remember each sandbox's netns and pod cgroup before the containers' records are gone.
    for id in $sandboxes; do
        info="$(ctrk containers info "$id" 2>/dev/null || echo '{}')"
        netns="$(jq -r '.Spec.linux.namespaces[]? | select(.type == "network") | .path // empty' <<<"$info")"
        cg="$(jq -r '.Spec.linux.cgroupsPath // empty' <<<"$info")"
        netns_paths+=("$id ${netns:-none}")
        if [ -n "$cg" ]; then cgroups+=("$(dirname "$cg")"); fi
    done

    # Everything dies at once: this is cleanup, not a graceful pod termination.
    for id in $ids; do ctrk tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    local deadline=$((SECONDS + 20)) running
    while :; do
        running="$(task_ids | awk '$2 == "RUNNING" || $2 == "PAUSED" || $2 == "PAUSING" {print $1}')"
        [ -z "$running" ] && break
        if [ "$SECONDS" -ge "$deadline" ]; then
            warn "tasks still running after SIGKILL: $running"
            break
        fi
        sleep 0.2
    done
    for id in $(task_ids | awk '{print $1}'); do
        ctrk tasks delete "$id" >/dev/null 2>&1 || ctrk tasks delete -f "$id" >/dev/null 2>&1 ||
            warn "could not delete task ${id:0:12}"
    done
    for id in $ids; do
        ctrk containers delete "$id" >/dev/null 2>&1 || warn "could not delete container ${id:0:12}"
    done

    local entry
    for entry in "${netns_paths[@]}"; do
        id="${entry%% *}"; netns="${entry#* }"
        [ "$netns" = none ] && netns=""
        cni_del "$id" "$netns"
        if [ -n "$netns" ]; then delete_netns "$netns"; fi
    done
    # Pod-level cgroups (kubepods/.../pod<uid>) are created by runc as parents of the
    # sandbox's cgroup and outlive it; rmdir only succeeds on empty ones.
    for cg in "${cgroups[@]}"; do
        for ctrl in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
            [ -d "$ctrl${cg#/}" ] && rmdir "$ctrl${cg#/}" 2>/dev/null || true
        done
    done
}

remove_orphan_netns() {
    local path name
    for path in /var/run/netns/cni-*; do
        [ -e "$path" ] || continue
        name="$(basename "$path")"
        if netns_is_ours "$name"; then
            log "removing leftover network namespace $name"
            delete_netns "$path"
        fi
    done
}

# Sandboxes deleted behind the CRI plugin's back keep their mounts under our state dir: the
# /dev/shm mount and, for a pod with its own user namespace (hostUsers: false), the namespace
# pinned at pinned-namespaces/user. Unmount those whose container no longer exists (the CRI
# plugin drops the directories at its next start).
unmount_orphan_sandbox_shm() {
    local existing="$1" mnt id prefix="$CONTAINERD_STATE/io.containerd.grpc.v1.cri/sandboxes/"
    while read -r mnt; do
        id="${mnt#"$prefix"}"
        id="${id%%/*}"
        grep -qx "$id" <<<"$existing" && continue
        umount "$mnt" 2>/dev/null || warn "could not unmount $mnt"
    done < <(awk -v p="$prefix" \
        'index($5, p) == 1 && ($5 ~ /\/shm$/ || $5 ~ /\/pinned-namespaces\/[^\/]+$/) {print $5}' \
        /proc/self/mountinfo)
}

# remove_owned — what setup recorded as made by us (lib.sh OWNED_DIR): the empty pod cgroup
# tree, portmap's nat chains once no hostPort rule is left in them, and ip_forward's old value.
remove_owned() {
    local h dir chain
    if [ -e "$OWNED_DIR/kubepods" ]; then
        for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
            [ -d "$h$KUBEPODS" ] || continue
            # Deepest first; rmdir refuses anything still holding processes or children.
            find "$h$KUBEPODS" -depth -type d 2>/dev/null | while read -r dir; do rmdir "$dir" 2>/dev/null || true; done
        done
        if ! compgen -G "/sys/fs/cgroup/*/$KUBEPODS" >/dev/null; then rm -f "$OWNED_DIR/kubepods"; fi
    fi
    if [ -e "$OWNED_DIR/portmap-chains" ]; then
        # Only the chains' own fixed rules left (no DNAT of any pod): remove them and their jumps.
        if [ "$(iptables -w -t nat -S CNI-HOSTPORT-DNAT 2>/dev/null | grep -c -- '^-A')" = 0 ]; then
            iptables -w -t nat -D PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT 2>/dev/null || true
            iptables -w -t nat -D OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT 2>/dev/null || true
            iptables -w -t nat -D POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" \
                -j CNI-HOSTPORT-MASQ 2>/dev/null || true
            for chain in "${PORTMAP_CHAINS[@]}"; do
                iptables -w -t nat -F "$chain" 2>/dev/null && iptables -w -t nat -X "$chain" 2>/dev/null || true
            done
            rm -f "$OWNED_DIR/portmap-chains"
        else
            warn "portmap's nat chains still hold hostPort rules; left in place"
        fi
    fi
    if [ -s "$OWNED_DIR/ip_forward" ]; then
        sysctl -qw "net.ipv4.ip_forward=$(cat "$OWNED_DIR/ip_forward")" && rm -f "$OWNED_DIR/ip_forward"
    fi
}

# Shims of our containerd that outlived their containers (a containerd killed while it deleted
# a task leaves its shim waiting for a delete that never comes). Ours: their -address is our
# private socket. When every container of ours is gone from containerd (ALL_GONE=1), what
# still runs under such a shim is a container that never started (a `runc init` stuck since
# its containerd was killed mid-create) and is killed with it; otherwise it is left alone.
stop_leftover_shims() {
    local all_gone="$1" d pid cmd kids
    for d in /proc/[0-9]*; do
        pid="${d#/proc/}"
        cmd="$(pid_cmdline "$pid")"
        case "$cmd" in
            *containerd-shim*"-address $CONTAINERD_SOCK "* | *containerd-shim*"-address $CONTAINERD_SOCK") ;;
            *) continue ;;
        esac
        # (ps exits 1 when the shim has no child: that is the usual case, not an error.)
        kids="$({ ps -o pid= --ppid "$pid" 2>/dev/null || true; } | tr -d ' ' | tr '\n' ' ')"
        if [ -n "$kids" ]; then
            if [ "$all_gone" != 1 ]; then
                warn "shim $pid still runs a container; left alone"
                continue
            fi
            log "killing leftovers of a deleted container under shim $pid: $kids"
            # shellcheck disable=SC2086  # one PID per word
            kill -KILL $kids 2>/dev/null || true
        fi
        kill -TERM "$pid" 2>/dev/null || true
        wait_for 5 "shim $pid to exit" test ! -d "/proc/$pid" || kill -KILL "$pid" 2>/dev/null || true
    done
    # Their sockets (nobody listens on them any more); the directory itself goes when empty.
    remove_stale_sockets_in /run/containerd/s
}

# Sockets left under our run directory by processes that are gone (an agent killed with
# SIGKILL cannot remove its control socket). A socket something still listens on stays.
remove_stale_sockets() { remove_stale_sockets_in "$CRILET_RUN"; }

remove_stale_sockets_in() {
    local sock listening
    listening="$(ss -xlnH 2>/dev/null | awk '{print $5}')"
    while read -r sock; do
        [ -n "$sock" ] || continue
        grep -qxF "$sock" <<<"$listening" && continue
        rm -f "$sock"
    done < <(find "$1" -type s 2>/dev/null)
}

remove_network() {
    if ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then
        log "deleting bridge $CNI_BRIDGE"
        ip link delete "$CNI_BRIDGE" type bridge || warn "could not delete bridge $CNI_BRIDGE"
    fi
    if iptables -w -S "$GUARD_CHAIN" >/dev/null 2>&1; then
        while iptables -w -D FORWARD -j "$GUARD_CHAIN" 2>/dev/null; do :; done
        iptables -w -F "$GUARD_CHAIN" && iptables -w -X "$GUARD_CHAIN" ||
            warn "could not remove iptables chain $GUARD_CHAIN"
    fi
}

# unmount_agent_root_dirs — the shared binds crilet makes of its --root-dir for mount
# propagation (a directory bind-mounted onto itself, recorded by the file rshared-bind in it),
# for every agent under $CRILET_DEV (the demo's, the tests', e2e's, the benchmarks'), with
# whatever pods' Bidirectional mounts or tests left below them; deepest first.
unmount_agent_root_dirs() {
    local root mnt
    while read -r root; do
        [ -f "$root/rshared-bind" ] || continue
        log "unmounting crilet's shared bind of $root"
        awk -v d="$root" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -ru |
            while read -r mnt; do
                umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || warn "could not unmount $mnt"
            done
    done < <(awk -v p="$CRILET_DEV/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -u)
}

# remove_agent_state — the demo agent's pod state (saved statuses, restart counts, emptyDirs)
# and its pod logs, once every pod is gone: a next demo must start its pods afresh, not count
# the containers this teardown removed as restarts.
remove_agent_state() {
    local dir
    for dir in "$CRILET_ROOT_DIR" "$CRILET_POD_LOGS_DIR" "$CRILET_DEV/containers-logs"; do
        [ -d "$dir" ] || continue
        if awk -v p="$dir/" 'index($5, p) == 1 {found=1} END {exit !found}' /proc/self/mountinfo; then
            warn "mounts remain under $dir; leaving it"
            continue
        fi
        rm -rf "$dir"
    done
}

# ------------------------------------------------------------------------------------------
# teardown_side_by_side — CRILET_RUNTIME=2.3: only what belongs to that containerd. Nothing
# shared is touched (no orphan-netns sweep, IPAM reset, bridge or guard removal: those belong
# to the main environment's pods too).
teardown_side_by_side() {
    local remaining=""
    if [ -f "$CONTAINERD_CONFIG" ] && { containerd_pid >/dev/null || [ -d "$CONTAINERD_STATE" ]; }; then
        if ! containerd_pid >/dev/null; then
            log "starting containerd $CRILET_RUNTIME to clean up"
            bash "$HACK_DIR/containerd.sh" start
        fi
        remove_k8s_containers
        remaining="$(ctrk containers ls -q 2>/dev/null || true)"
    fi
    bash "$HACK_DIR/containerd.sh" stop
    stop_leftover_shims "$([ -z "$remaining" ] && echo 1 || echo 0)"
    [ -d "$CONTAINERD_STATE" ] && unmount_orphan_sandbox_shm "$remaining"
    remove_stale_sockets_in "$(dirname "$CONTAINERD_SOCK")"
    # Its run-time state (socket dir, state, runc root) goes with it once nothing of it is
    # left: no container, no mount below. The persistent root and config stay, as for 2.1.
    local dir
    for dir in "$(dirname "$CONTAINERD_SOCK")" "$RUNC_ROOT"; do
        [ -d "$dir" ] && [ -z "$remaining" ] || continue
        if awk -v p="$dir/" 'index($5, p) == 1 {found=1} END {exit !found}' /proc/self/mountinfo; then
            warn "mounts remain under $dir; leaving it"
        else
            rm -rf "$dir"
        fi
    done
    rm -f "$ENV_FILE"
    [ -n "$remaining" ] && warn "containers still in containerd $CRILET_RUNTIME's $K8S_NS: $remaining"
    echo "containerd $CRILET_RUNTIME (beside the main environment) torn down in $((SECONDS - T0))s"
}
if [ "$SIDE_BY_SIDE" = 1 ]; then
    [ "$ALL" = 1 ] && die "--all removes the main environment too: run it without CRILET_RUNTIME=$CRILET_RUNTIME"
    teardown_side_by_side
    exit 0
fi

# A containerd beside this environment uses its network and registry: it goes first.
if [ -e "$CRILET_RUN/env-2.3" ] || [ -e "$CRILET_RUN/containerd-2.3.pid" ]; then
    CRILET_RUNTIME=2.3 bash "$HACK_DIR/teardown.sh" || warn "teardown of containerd 2.3 failed"
fi
# hack/kruise.sh's OpenKruise first: its webhook configurations go while the API server still
# answers (a webhook whose server is gone refuses pods), then its daemons and manager by pid
# file, and its /hostvarrun link. Its binaries and Go caches (/var/lib/crilet-dev/kruise) stay.
bash "$HACK_DIR/kruise.sh" down || warn "hack/kruise.sh down failed; kruise-manager or a kruise-daemon may still run"
stop_crilet
# hack/guest.sh's QEMU guest, if one still runs (its image stays, as the Go builds do).
bash "$HACK_DIR/guest.sh" down || warn "hack/guest.sh down failed; the guest may still run"
# hack/e2e.sh's node (crilet-e2e): its agent by pid, its pods, e2e namespaces, Node and state.
bash "$HACK_DIR/e2e.sh" clean || warn "hack/e2e.sh clean failed; the e2e node may still run"
# The cluster after crilet (its client), before containerd (they do not depend on each other).
bash "$HACK_DIR/cluster.sh" down --purge || warn "hack/cluster.sh down failed; the control plane may still run"

remaining=""
listed=0 # 1 once containerd answered the list below (an empty answer then means no pods)
if [ -f "$CONTAINERD_CONFIG" ]; then
    # Pods can only be removed through containerd: start ours if it is down (its shims may
    # still run containers from before).
    if ! containerd_pid >/dev/null; then
        log "starting our containerd to clean up"
        bash "$HACK_DIR/containerd.sh" start
    fi
    remove_k8s_containers
    if remaining="$(ctrk containers ls -q 2>/dev/null)"; then listed=1; else remaining=""; fi
fi
remove_orphan_netns
if [ "$listed" = 1 ] && [ -z "$remaining" ]; then
    unmount_agent_root_dirs
    remove_agent_state
fi
if [ -z "$remaining" ] && [ -d "$CNI_IPAM_DIR" ]; then
    # No sandbox of ours is left, so no lease in our private store can be live.
    find "$CNI_IPAM_DIR" -mindepth 1 -delete
fi
remove_network
bash "$HACK_DIR/containerd.sh" stop
stop_leftover_shims "$([ -z "$remaining" ] && echo 1 || echo 0)"
# containerd hard-codes its shims' socket directory (/run/containerd/s); once our shims are
# gone it is empty, and an empty directory is ours to remove (rmdir never removes anything of
# a system containerd's).
rmdir /run/containerd/s /run/containerd 2>/dev/null || true
[ -d "$CONTAINERD_STATE" ] && unmount_orphan_sandbox_shm "$remaining"
[ "$KEEP_REGISTRY" = 1 ] || stop_registry
remove_stale_sockets
remove_owned
rm -f "$ENV_FILE" "$RUNTIME_FILE"

if [ "$ALL" = 1 ]; then
    # Refuse to rm -rf across a live mount (it would delete through it).
    for dir in "$CRILET_DEV" "$CRILET_RUN"; do
        awk -v p="$dir/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r |
            while read -r mnt; do umount "$mnt" 2>/dev/null || umount -l "$mnt" || true; done
        if awk -v p="$dir/" 'index($5, p) == 1 {found=1} END {exit !found}' /proc/self/mountinfo; then
            die "mounts remain under $dir; not deleting it"
        fi
    done
    log "removing $CRILET_DEV and $CRILET_RUN"
    rm -rf "$CRILET_DEV" "$CRILET_RUN"
fi

[ -n "$remaining" ] && warn "containers still in $K8S_NS: $remaining"
echo "crilet-dev torn down in $((SECONDS - T0))s$([ "$ALL" = 1 ] && echo ' (all data removed)' || echo '; images and registry data kept')"
