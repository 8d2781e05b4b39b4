#!/usr/bin/env bash
# hack/verify-clean.sh — after hack/teardown.sh: is anything of the project left on the machine?
#
# Usage: hack/verify-clean.sh   (as root; hack/test.sh runs it after its final teardown)
# Checks: no process of ours (containerd, registry, shims, crilet, critest's containerd, the
# control plane of hack/cluster.sh: no pid file of it, no listener on its ports; OpenKruise's
# kruise-manager and kruise-daemons of hack/kruise.sh, likewise, and its /hostvarrun link), no
# pod cgroup in any hierarchy (when setup made the pod cgroup parent), no socket under
# /run/crilet-dev, no mount under /run/crilet-dev or /var/lib/crilet-dev (crilet's shared
# binds of its agents' root dirs among them, named as such), no network
# namespace or interface of ours (bridges crilet0 / crilet-ct0 and their veths), no iptables
# chain of ours (CRILET-*; portmap's CNI-HOSTPORT-* when setup made them), ip_forward back to
# its earlier value. Prints one line per leftover; exit 1 if there is any.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
require_root

left=()
leftover() { left+=("$*"); printf 'left behind: %s\n' "$*" >&2; }

# Processes: anything whose argv names our private directories.
for d in /proc/[0-9]*; do
    cmd="$(pid_cmdline "${d#/proc/}")"
    case "$cmd" in
        *"$CRILET_DEV"* | *"$CRILET_RUN"*) leftover "process ${d#/proc/}: ${cmd:0:160}" ;;
    esac
done

# hack/cluster.sh's control plane: no pid file left (cluster.sh down removes them), no process
# behind one, nothing listening on its ports (etcd, kube-apiserver, -controller-manager,
# -scheduler, metrics-server).
for pidfile in "$CLUSTER_RUN"/*.pid; do
    [ -e "$pidfile" ] || continue
    pid="$(tr -dc '0-9' <"$pidfile")"
    if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
        leftover "cluster process $pid ($(basename "$pidfile" .pid)): $(pid_cmdline "$pid" | cut -c1-160)"
    else
        leftover "cluster pid file $pidfile (process gone)"
    fi
done
for port in "${CLUSTER_PORTS[@]}"; do
    while read -r listener; do
        leftover "listener on cluster port $port: $listener"
    done < <(ss -Hltnp "sport = :$port" 2>/dev/null | awk '{print $4, $6}')
done

# hack/kruise.sh's OpenKruise: no pid file of kruise-manager or a kruise-daemon, nothing on
# their ports, no /hostvarrun symlink of ours (their processes run binaries under $KRUISE_DIR,
# so the argv check above sees them too).
for pidfile in "$KRUISE_RUN"/*.pid; do
    [ -e "$pidfile" ] || continue
    leftover "kruise pid file $pidfile"
done
for port in "$KRUISE_MANAGER_METRICS_PORT" "$KRUISE_MANAGER_HEALTH_PORT" "$KRUISE_WEBHOOK_PORT" \
    $(seq "${KRUISE_DAEMON_PORTS[0]}" "${KRUISE_DAEMON_PORTS[1]}"); do
    while read -r listener; do
        leftover "listener on kruise port $port: $listener"
    done < <(ss -Hltnp "sport = :$port" 2>/dev/null | awk '{print $4, $6}')
done
if [ -L "$HOSTVARRUN" ] && [ "$(readlink "$HOSTVARRUN")" = "$(dirname "$CONTAINERD_SOCK")" ]; then
    leftover "symlink $HOSTVARRUN (hack/kruise.sh)"
fi

if [ -e "$OWNED_DIR/kubepods" ] || [ ! -d "$OWNED_DIR" ]; then
    while read -r cg; do
        leftover "pod cgroup $cg"
    done < <(find /sys/fs/cgroup/*/"$KUBEPODS" /sys/fs/cgroup/"$KUBEPODS" -maxdepth 2 -type d -name 'pod*' 2>/dev/null)
fi

while read -r sock; do leftover "socket $sock"; done < <(find "$CRILET_RUN" -type s 2>/dev/null)

while read -r mnt; do
    if [ -f "$mnt/rshared-bind" ]; then
        leftover "mount $mnt (crilet's shared bind of a root dir, for mount propagation)"
    else
        leftover "mount $mnt"
    fi
done < <(awk -v a="$CRILET_RUN/" -v b="$CRILET_DEV/" \
    'index($5, a) == 1 || index($5, b) == 1 {print $5}' /proc/self/mountinfo)

for link in crilet0 crilet-ct0; do
    if ip link show "$link" >/dev/null 2>&1; then leftover "interface $link"; fi
    while read -r veth; do leftover "interface $veth (on $link)"; done < <(ip -o link show master "$link" 2>/dev/null | awk -F': ' '{print $2}')
done
for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case "$ns" in cni-*) ip -n "$ns" -4 -o addr show 2>/dev/null | grep -q ' 10\.88\.7[78]\.' && leftover "network namespace $ns" ;; esac
done

for table in filter nat; do
    while read -r chain; do leftover "iptables chain $chain ($table)"; done < <(iptables -w -t "$table" -S 2>/dev/null |
        awk '$1 == "-N" && $2 ~ /^CRILET-/ {print $2}')
done
if [ -e "$OWNED_DIR/portmap-chains" ]; then
    for chain in "${PORTMAP_CHAINS[@]}"; do
        if iptables -w -t nat -S "$chain" >/dev/null 2>&1; then leftover "iptables chain $chain (nat)"; fi
    done
fi

if [ -s "$OWNED_DIR/ip_forward" ]; then
    leftover "net.ipv4.ip_forward is $(cat /proc/sys/net/ipv4/ip_forward), was $(cat "$OWNED_DIR/ip_forward")"
fi

if [ "${#left[@]}" -gt 0 ]; then
    echo "verify-clean: ${#left[@]} leftovers" >&2
    exit 1
fi
echo "verify-clean: nothing of crilet-dev is left on the machine"
