#!/usr/bin/env bash
# hack/setup.sh — bring up crilet's test environment on this machine (idempotent).
#
# Usage: [CRILET_RUNTIME=2.1|1.6|2.3] hack/setup.sh [-v]  (as root; rerun at will, also after a half-done run)
# Quiet by default (one line per step; apt output in /var/lib/crilet-dev/logs/setup.log); -v shows all.
# CRILET_RUNTIME picks the containerd (lib.sh): 2.1, the default, is Debian sid's 2.x in a
# private prefix; 1.6 is bookworm's package. Asking for the other one than the environment
# runs tears that one down first.
# CRILET_RUNTIME=2.3 instead adds a second containerd BESIDE the running environment (set that
# up first): containerd v2.3 built from its Go module (lib.sh's ensure_containerd_go), its own
# socket /run/crilet-dev/containerd-2.3/containerd.sock, root, state, runc root and log, the
# same registry, images and CNI network; env in /run/crilet-dev/env-2.3. The main
# environment is not touched. Undo with CRILET_RUNTIME=2.3 hack/teardown.sh.
# Installs the Debian packages if missing, writes a private containerd config (CRI, CNI
# bridge crilet0 on 10.88.77.0/24, plain-http registry), starts that containerd and a local
# registry on 127.0.0.1:5099, builds and pushes the images pause:3.10, busybox:1.36,
# web:v1 and web:v2 (skipped when unchanged), pulls them into containerd's k8s.io namespace,
# and writes /run/crilet-dev/env (KEY=VALUE, sourceable) for tests and tools.
# A running containerd whose config changed is restarted (containers survive).
# Undo with hack/teardown.sh [--all].
set -euo pipefail
. "$(dirname "$0")/lib.sh"

T0=$SECONDS
require_root
for arg in "$@"; do
    case "$arg" in
        -v | --verbose) CRILET_VERBOSE=1; export CRILET_VERBOSE ;;
        *) die "unknown argument: $arg (usage: $0 [-v])" ;;
    esac
done

# ------------------------------------------------------------------------------------------
# Packages
# ------------------------------------------------------------------------------------------
# gcc and make build jemalloc, the agent's allocator (tikv-jemalloc-sys), from its C sources;
# with libseccomp-dev and pkg-config they build runc >= 1.2 for containerd 2.x (lib.sh's
# ensure_runc_go; bookworm's runc, 1.1, stays containerd 1.6's).
PACKAGES=(containerd runc containernetworking-plugins docker-registry skopeo umoci
    busybox-static catatonit protobuf-compiler iproute2 iptables curl jq gcc make libseccomp-dev pkg-config)

install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
            missing+=("$p")
        fi
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    log "installing: ${missing[*]}"
    # Without a service manager, package scripts could still start daemons through
    # init.d (docker-registry ships one, listening on :5000). We run our own instances, so
    # forbid service starts during the install — unless the admin already has a policy.
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        own_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    quietly apt-get update -q
    DEBIAN_FRONTEND=noninteractive quietly apt-get install -y -q "${missing[@]}"
    if [ "$own_policy" = 1 ]; then rm -f "$policy"; trap - EXIT; fi
}

# ------------------------------------------------------------------------------------------
# Host prerequisites
# ------------------------------------------------------------------------------------------
check_cgroups() {
    # runc's cgroupfs driver writes straight into /sys/fs/cgroup. Make sure the hierarchy is
    # mounted and writable before containerd hides the reason behind a sandbox error.
    if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        log "cgroups v2 (unified) at /sys/fs/cgroup"
        mkdir -p /sys/fs/cgroup/crilet-dev-probe && rmdir /sys/fs/cgroup/crilet-dev-probe ||
            die "/sys/fs/cgroup is not writable"
        return 0
    fi
    local c missing=()
    for c in cpu cpuacct memory pids devices freezer blkio cpuset; do
        if ! grep -qE "^[^ ]+ [^ ]+ [^ ]+ [^ ]+ /sys/fs/cgroup/$c .* - cgroup " /proc/self/mountinfo; then
            missing+=("$c")
            continue
        fi
        mkdir -p "/sys/fs/cgroup/$c/crilet-dev-probe" && rmdir "/sys/fs/cgroup/$c/crilet-dev-probe" ||
            die "cgroup controller $c at /sys/fs/cgroup/$c is not writable"
    done
    case " ${missing[*]} " in
        *" memory "* | *" cpu "* | *" pids "* | *" devices "*)
            die "cgroups v1 controllers missing under /sys/fs/cgroup: ${missing[*]}" ;;
    esac
    [ "${#missing[@]}" -eq 0 ] || warn "optional cgroup v1 controllers not mounted: ${missing[*]}"
}

# record_owned — note what does not exist yet and will be made by what setup starts: the pod
# cgroup parent (runc makes it for our pods) and portmap's nat chains (the CNI plugin makes
# them). Teardown removes those, and only those.
record_owned() {
    if ! compgen -G "/sys/fs/cgroup/*/$KUBEPODS" >/dev/null && [ ! -d "/sys/fs/cgroup/$KUBEPODS" ]; then
        touch "$OWNED_DIR/kubepods"
    fi
    if ! iptables -w -t nat -S "${PORTMAP_CHAINS[0]}" >/dev/null 2>&1; then
        touch "$OWNED_DIR/portmap-chains"
    fi
}

setup_sysctls() {
    # The bridge plugin (isGateway) turns forwarding on at the first pod anyway; doing it
    # here makes the host state predictable. Pod egress is blocked by the guard below.
    # Remember an earlier value once, so teardown can put it back.
    local before
    before="$(cat /proc/sys/net/ipv4/ip_forward)"
    if [ "$before" != 1 ] && [ ! -e "$OWNED_DIR/ip_forward" ]; then
        echo "$before" >"$OWNED_DIR/ip_forward"
    fi
    sysctl -qw net.ipv4.ip_forward=1
    # bridge-nf-call-iptables is not needed by the bridge/portmap plugins; leave the host's
    # choice alone, only make sure the module is there if someone relies on it.
    if [ ! -d /proc/sys/net/bridge ] && command -v modprobe >/dev/null; then
        modprobe br_netfilter 2>/dev/null || true
    fi
}

install_egress_guard() {
    # Pods must only ever talk to this machine and to each other: forwarded packets from the
    # pod subnet to anywhere outside it are dropped. (ipMasq=false already makes replies
    # impossible; this makes sure nothing even leaves.)
    iptables -w -N "$GUARD_CHAIN" 2>/dev/null || true
    iptables -w -F "$GUARD_CHAIN"
    iptables -w -A "$GUARD_CHAIN" -s "$POD_CIDR" -d "$POD_CIDR" -j RETURN
    iptables -w -A "$GUARD_CHAIN" -s "$POD_CIDR" -j DROP
    iptables -w -C FORWARD -j "$GUARD_CHAIN" 2>/dev/null || iptables -w -I FORWARD 1 -j "$GUARD_CHAIN"
}

# ------------------------------------------------------------------------------------------
# Config files
# ------------------------------------------------------------------------------------------
CONTAINERD_CONFIG_CHANGED=0

# write_file PATH [MODE] < content — replace PATH only if the content differs (atomic);
# returns 0 if it changed, 1 if it was already up to date.
write_file() {
    local path="$1" mode="${2:-0644}" tmp
    mkdir -p "$(dirname "$path")"
    tmp="$(mktemp "$path.XXXXXX")"
    cat >"$tmp"
    chmod "$mode" "$tmp"
    if [ -f "$path" ] && cmp -s "$tmp" "$path"; then
        rm -f "$tmp"
        return 1
    fi
    mv -f "$tmp" "$path"
    return 0
}

write_containerd_config() {
    local config
    # containerd 2.x runs runc >= 1.2 (user namespaces); 1.6 the system's.
    if [ "$CRILET_RUNTIME" = 1.6 ]; then config="$(containerd_config 2)"; else config="$(containerd_config 3 "runc=$RUNC_GO_BIN")"; fi
    if write_file "$CONTAINERD_CONFIG" <<<"$config"; then
        CONTAINERD_CONFIG_CHANGED=1
        log "wrote $CONTAINERD_CONFIG"
    fi

    # The local registry speaks plain http; CRI pulls read this hosts.toml. So does the one with
    # basic auth that the cluster tests start for imagePullSecrets (AUTH_REGISTRY), and the slow
    # one of the Kruise benchmark (SLOW_REGISTRY).
    local reg
    for reg in "$REGISTRY" "$AUTH_REGISTRY" "$SLOW_REGISTRY"; do
        if write_file "$CONTAINERD_CERTS_D/$reg/hosts.toml" <<EOF
# Generated by hack/setup.sh: a local test registry, plain http on loopback.
server = "http://$reg"

[host."http://$reg"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
EOF
        then log "wrote $CONTAINERD_CERTS_D/$reg/hosts.toml"; fi
    done

    # The CRI plugin watches conf_dir, so a changed network takes effect without a restart
    # (for new sandboxes).
    if cni_conflist | jq . | write_file "$CNI_CONF_DIR/10-$CNI_NETWORK.conflist"; then
        log "wrote $CNI_CONF_DIR/10-$CNI_NETWORK.conflist"
    fi
    mkdir -p "$CNI_IPAM_DIR"
}

write_registry_config() {
    if write_file "$REGISTRY_CONFIG" <<EOF
# Generated by hack/setup.sh — local test registry, loopback only, no auth.
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $REGISTRY_STORAGE
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $REGISTRY_LISTEN
  secret: crilet-dev-local-only
health:
  storagedriver:
    enabled: false
EOF
    then log "wrote $REGISTRY_CONFIG"; fi
}

# ------------------------------------------------------------------------------------------
# containerd
# ------------------------------------------------------------------------------------------
start_containerd() {
    if [ "$CONTAINERD_CONFIG_CHANGED" = 1 ] && containerd_pid >/dev/null; then
        log "containerd config changed; restarting containerd (containers keep running)"
        bash "$HACK_DIR/containerd.sh" restart
    else
        bash "$HACK_DIR/containerd.sh" start
    fi
}

# ------------------------------------------------------------------------------------------
# Images
# ------------------------------------------------------------------------------------------
# Builds are reproducible (every mtime and the config's creation time are the epoch, no
# history), so the same inputs give the same digests on every machine and every rerun.
# A stamp of the inputs (tool versions, binaries, this recipe's own text) lets a rerun skip
# the build when the registry still serves exactly what was built last time.
OCI="$IMAGE_BUILD_DIR/oci"
EPOCH=1970-01-01T00:00:00Z
STAMP="$IMAGE_BUILD_DIR/inputs.sha256"
PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HISTORY=(--history.created "$EPOCH" --history.author crilet-hack)

# Every image: NAME TAG (also the OCI layout's tag: NAME-TAG).
IMAGES=("pause 3.10" "busybox 1.36" "web v1" "web v2")

zero_mtimes() { find "$@" -exec touch -h -d @0 {} +; }

# Each build_* works on an unpacked bundle and repacks it as one layer.
build_pause() {
    local b="$IMAGE_BUILD_DIR/bundle"
    umoci new --image "$OCI:pause-3.10"
    umoci unpack --rootless --image "$OCI:pause-3.10" "$b"
    install -m 0755 /usr/bin/catatonit "$b/rootfs/pause"
    zero_mtimes "$b/rootfs"
    umoci repack "${HISTORY[@]}" --history.created_by "COPY catatonit /pause" --image "$OCI:pause-3.10" "$b"
    umoci config --no-history --image "$OCI:pause-3.10" --created "$EPOCH" \
        --config.entrypoint /pause --config.entrypoint -P
    rm -rf "$b"
}

build_busybox() {
    local b="$IMAGE_BUILD_DIR/bundle" r applet
    umoci new --image "$OCI:busybox-1.36"
    umoci unpack --rootless --image "$OCI:busybox-1.36" "$b"
    r="$b/rootfs"
    mkdir -p "$r/bin" "$r/etc" "$r/root" "$r/proc" "$r/sys" "$r/dev" "$r/var"
    install -d -m 1777 "$r/tmp"
    install -m 0755 /bin/busybox "$r/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$r/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$r/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
    zero_mtimes "$r"
    umoci repack "${HISTORY[@]}" --history.created_by "COPY busybox-static /bin (+applet links, /etc)" \
        --image "$OCI:busybox-1.36" "$b"
    umoci config --no-history --image "$OCI:busybox-1.36" --created "$EPOCH" \
        --config.env "$PATH_ENV" --config.cmd sh
    rm -rf "$b"
}

# build_web VERSION — busybox plus one small layer with /www.
build_web() {
    local v="$1" b="$IMAGE_BUILD_DIR/bundle" r
    umoci unpack --rootless --image "$OCI:busybox-1.36" "$b"
    r="$b/rootfs"
    mkdir -p "$r/www"
    echo "$v" >"$r/www/index.html"
    echo ok >"$r/www/healthz"
    # Only what changed gets the epoch mtime again, so the new layer holds just /www.
    touch -h -d @0 "$r"
    zero_mtimes "$r/www"
    umoci repack "${HISTORY[@]}" --history.created_by "COPY /www (index.html: $v)" --image "$OCI:web-$v" "$b"
    # busybox httpd as PID 1 would ignore SIGTERM (PID 1 has no default signal actions),
    # so every stop would cost the whole grace period. A shell that traps TERM, runs
    # `httpd -f -p 8080 -h /www` and exits 0 on TERM stops at once.
    umoci config --no-history --image "$OCI:web-$v" --created "$EPOCH" \
        --config.entrypoint /bin/sh --config.entrypoint -c \
        --config.entrypoint "trap 'exit 0' TERM; httpd -f -p 8080 -h /www & wait" \
        --clear config.cmd --config.exposedports 8080/tcp
    rm -rf "$b"
}

image_inputs_hash() {
    {
        declare -f zero_mtimes build_pause build_busybox build_web
        echo "$EPOCH $PATH_ENV ${IMAGES[*]} ${HISTORY[*]}"
        umoci --version
        sha256sum /usr/bin/catatonit /bin/busybox
    } | sha256sum | cut -d' ' -f1
}

# images_current — true if the stamp matches the inputs and the registry serves, for every
# tag, the digest recorded when it was pushed.
images_current() {
    local want="$1" img name tag rec
    [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] || return 1
    for img in "${IMAGES[@]}"; do
        read -r name tag <<<"$img"
        rec="$IMAGE_BUILD_DIR/digests/$name-$tag"
        [ -s "$rec" ] || return 1
        [ "$(registry_digest "$name" "$tag")" = "$(cat "$rec")" ] || return 1
    done
}

build_and_push_images() {
    local want img name tag
    want="$(image_inputs_hash)"
    if images_current "$want"; then
        log "images up to date in the registry (inputs $want)"
        return 0
    fi
    log "building images"
    rm -rf "$OCI" "$IMAGE_BUILD_DIR/bundle" "$IMAGE_BUILD_DIR/digests" "$STAMP"
    mkdir -p "$IMAGE_BUILD_DIR/digests"
    umoci init --layout "$OCI"
    build_pause
    build_busybox
    build_web v1
    build_web v2
    umoci gc --layout "$OCI"
    for img in "${IMAGES[@]}"; do
        read -r name tag <<<"$img"
        # --insecure-policy: a local copy between our own layout and our own registry needs
        # no signature policy (and should not depend on /etc/containers/policy.json).
        skopeo --insecure-policy copy -q --dest-tls-verify=false \
            --digestfile "$IMAGE_BUILD_DIR/digests/$name-$tag" \
            "oci:$OCI:$name-$tag" "docker://$REGISTRY/$name:$tag"
        log "pushed $REGISTRY/$name:$tag $(cat "$IMAGE_BUILD_DIR/digests/$name-$tag")"
    done
    echo "$want" >"$STAMP"
}

pull_images() {
    # Pull through our containerd into the CRI namespace: proves the registry path works and
    # saves every test a first pull. (ctr does not read certs.d, hence --plain-http; CRI
    # pulls use hosts.toml.)
    local img name tag out
    for img in "${IMAGES[@]}"; do
        read -r name tag <<<"$img"
        if ! out="$(ctrk images pull --plain-http "$REGISTRY/$name:$tag" 2>&1)"; then
            echo "$out" >&2
            die "pull of $REGISTRY/$name:$tag through containerd failed"
        fi
    done
    log "pulled ${#IMAGES[@]} images from $REGISTRY into containerd (namespace $K8S_NS)"
}

write_env_file() {
    local dig_args=() img name tag var
    for img in "${IMAGES[@]}"; do
        read -r name tag <<<"$img"
        var="$(echo "${name}" | tr '[:lower:]' '[:upper:]')"
        [ "$name" = web ] && var="WEB_$(echo "$tag" | tr '[:lower:]' '[:upper:]')"
        dig_args+=("CRILET_IMAGE_${var}_DIGEST=$(cat "$IMAGE_BUILD_DIR/digests/$name-$tag")")
    done
    # Plain KEY=VALUE lines without quotes or comments: valid shell, and trivial to parse.
    write_file "$ENV_FILE" <<EOF || true
CRILET_RUNTIME=$CRILET_RUNTIME
CRILET_RUNTIME_VERSION=$RUNTIME_VERSION
CRILET_CONTAINERD_BIN_DIR=$CONTAINERD_BIN_DIR
CRILET_CONTAINERD_ENDPOINT=unix://$CONTAINERD_SOCK
CRILET_CONTAINERD_SOCKET=$CONTAINERD_SOCK
CRILET_CONTAINERD_NAMESPACE=$K8S_NS
CRILET_CONTAINERD_CONFIG=$CONTAINERD_CONFIG
CRILET_CONTAINERD_LOG=$CONTAINERD_LOG
CRILET_REGISTRY=$REGISTRY
CRILET_AUTH_REGISTRY=$AUTH_REGISTRY
CRILET_SLOW_REGISTRY=$SLOW_REGISTRY
CRILET_IMAGE_PAUSE=$IMAGE_PAUSE
CRILET_IMAGE_BUSYBOX=$IMAGE_BUSYBOX
CRILET_IMAGE_WEB_V1=$IMAGE_WEB_V1
CRILET_IMAGE_WEB_V2=$IMAGE_WEB_V2
$(printf '%s\n' "${dig_args[@]}")
CRILET_DEV=$CRILET_DEV
CRILET_RUN=$CRILET_RUN
CRILET_POD_CIDR=$POD_CIDR
CRILET_CNI_BRIDGE=$CNI_BRIDGE
CRILET_CNI_NETWORK=$CNI_NETWORK
CRILET_CGROUP_DRIVER=cgroupfs
EOF
}

# ------------------------------------------------------------------------------------------
# switch_runtime_if_needed — the environment runs one containerd at a time: when another
# runtime than the requested one is set up, tear that one down first (its pods with it).
switch_runtime_if_needed() {
    local active
    active="$(cat "$RUNTIME_FILE" 2>/dev/null || true)"
    [ -n "$active" ] && [ "$active" != "$CRILET_RUNTIME" ] || return 0
    log "switching the environment from containerd $active to $CRILET_RUNTIME (tearing $active down)"
    CRILET_RUNTIME="$active" bash "$HACK_DIR/teardown.sh" --keep-registry >&2
}

# setup_side_by_side — CRILET_RUNTIME=2.3: only what is this containerd's own; everything
# shared (packages, sysctls, egress guard, CNI network, registry, images) is the main
# environment's and must already be there.
setup_side_by_side() {
    [ -s "$MAIN_ENV_FILE" ] && registry_answers ||
        die "containerd $CRILET_RUNTIME runs beside the main environment: run hack/setup.sh (2.1) first"
    ensure_containerd_go
    ensure_runc_go
    mkdir -p "$(dirname "$CONTAINERD_SOCK")" "$LOG_DIR"
    write_containerd_config
    start_containerd
    RUNTIME_VERSION="$(ctrd version | awk '/Server:/ {s=1} s && /Version:/ {print $2; exit}')"
    pull_images
    write_env_file
    echo "containerd $RUNTIME_VERSION ready beside the main environment in $((SECONDS - T0))s: pid $(containerd_pid)" \
        "at unix://$CONTAINERD_SOCK, env in $ENV_FILE"
}
if [ "$SIDE_BY_SIDE" = 1 ]; then
    setup_side_by_side
    exit 0
fi

install_packages
switch_runtime_if_needed
if [ "$CRILET_RUNTIME" != 1.6 ]; then ensure_containerd_sid; ensure_runc_go; fi
if [ -S /run/containerd/containerd.sock ]; then
    log "a system containerd socket exists at /run/containerd; it is left alone (we use $CONTAINERD_SOCK)"
fi
mkdir -p "$CRILET_DEV" "$CRILET_RUN" "$LOG_DIR" "$IMAGE_BUILD_DIR"
chmod 0755 "$CRILET_DEV" "$CRILET_RUN"
mkdir -p "$OWNED_DIR"
record_owned
check_cgroups
setup_sysctls
install_egress_guard
write_containerd_config
write_registry_config
echo "$CRILET_RUNTIME" >"$RUNTIME_FILE"
start_containerd
RUNTIME_VERSION="$(ctrd version | awk '/Server:/ {s=1} s && /Version:/ {print $2; exit}')"
start_registry
build_and_push_images
pull_images
write_env_file

echo "crilet-dev ready in $((SECONDS - T0))s: containerd $RUNTIME_VERSION pid $(containerd_pid) at unix://$CONTAINERD_SOCK," \
    "registry pid $(registry_pid) at $REGISTRY, images pause:3.10 busybox:1.36 web:v1 web:v2," \
    "pods on $CNI_BRIDGE $POD_CIDR, env in $ENV_FILE"
