#!/usr/bin/env bash
# hack/e2e.sh — run upstream's [sig-node] [Conformance] e2e specs (k8s.io/kubernetes test/e2e,
# v1.36.3) against ONE crilet node joined to hack/cluster.sh's control plane.
#
# Usage: hack/e2e.sh [run] [--focus RE] [--skip RE] [--limit N] [--nodes N] [--timeout DUR]
#                          [--crilet-bin PATH]
#        hack/e2e.sh build     build e2e.test, ginkgo and agnhost only (cached by version)
#        hack/e2e.sh images    build/push the test images into the local registry only
#        hack/e2e.sh list      the specs the focus/skip select (dry run, no cluster needed)
#        hack/e2e.sh clean     stop the e2e node (by pid), delete the e2e namespaces, its pods,
#                              its Node and its state (hack/teardown.sh runs this)
#   --focus RE    ginkgo focus (default '\[sig-node\].*\[Conformance\]')
#   --skip RE     ginkgo skip (default: none besides upstream's own; \[Serial\] is NOT skipped)
#   --limit N     run only the first N specs (in ginkgo's alphabetical order) of the selection
#   --nodes N     ginkgo parallel processes (default 1: serial, as one node on 2 cores)
#   --timeout D   the suite's ginkgo timeout (default 3h)
#   --crilet-bin P  run this crilet binary instead of `cargo build --release`'s
#   -v            show build output as it comes
# Exit status: 0 when every selected spec passed, 1 when one failed (or a step failed).
#
# What `run` does (as root, after hack/setup.sh; every step is skipped when already done):
#   1. hack/cluster.sh (up): the control plane on 127.0.0.1 (builds it when missing);
#   2. e2e.test (`go test -c k8s.io/kubernetes/test/e2e`), ginkgo and agnhost from the
#      k8s.io/kubernetes Go module at the cluster's version, through a wrapper module generated
#      next to hack/cluster.sh's (its go.mod's staging replaces, plus a tools.go that imports
#      what test/e2e's test file imports), GOCACHE/GOMODCACHE shared with it, `nice -n 10`,
#      into /var/lib/crilet-dev/k8s/v1.36.3/e2e/bin (a stamp of the recipe: rerun builds nothing);
#   3. the test images, pushed to the LOCAL registry (localhost:5099) under the paths the
#      e2e framework asks for (KUBE_TEST_REPO_LIST maps registry.k8s.io/e2e-test-images to
#      localhost:5099/e2e-test-images, registry.k8s.io to localhost:5099):
#        e2e-test-images/busybox:1.37.0-1  = hack/setup.sh's busybox:1.36 (busybox-static)
#        pause:3.10.2                      = hack/setup.sh's pause:3.10 (catatonit)
#        e2e-test-images/agnhost:2.63.0    = that busybox + /agnhost built from the module
#                                            (+ agnhost-2 link, /uploads, porter's cert/key,
#                                            user-defined-in-image 1000 / group 50000, as
#                                            upstream's Dockerfile), ENTRYPOINT /agnhost, CMD pause
#        e2e-test-images/agnhost:2.55      = the same with a distinct label (another digest)
#      Nothing else is provided (nginx, httpd, nonroot, ... are not buildable here): specs
#      that need them fail with ErrImagePull, as docs/conformance.md says;
#   4. a crilet node `crilet-e2e` (target/release/crilet, `cargo build --release`; node
#      identity by `hack/cluster.sh node crilet-e2e`) with the flags tests/common/cluster.rs
#      uses, kubelet API on 127.0.0.1:10350, root/pod-logs/manifests under
#      /var/lib/crilet-dev/e2e/node, control socket /run/crilet-dev/e2e/crilet.sock, pid file
#      /run/crilet-dev/e2e/crilet.pid, log /var/lib/crilet-dev/logs/e2e-crilet.log; waits
#      for the Node to be Ready and untainted;
#   5. e2e.test with the admin kubeconfig, --provider skeleton, the focus/skip, a JUnit report
#      and log in /var/lib/crilet-dev/logs/e2e-<stamp>/ (e2e.log, junit_01.xml, summary.txt);
#      Every pod created in an e2e namespace is pinned to that node (a MutatingAdmissionPolicy
#      adds nodeSelector crilet.io/e2e=true and rewrites a foreign spec.nodeName), so other
#      nodes in the cluster (tests, benchmarks) never get the suite's pods;
#   6. afterwards (also on failure or Ctrl-C): removes that policy, stops the crilet node by pid, force-deletes its
#      pods and Node, deletes the namespaces the run created, and removes the node's containers
#      (by its pod UIDs only) — other nodes' pods are never touched;
#   7. prints passed/failed/skipped and the failed specs.
# Everything dials 127.0.0.1 or pod IPs on the CNI bridge: the suite's own address checks
# use the node's InternalIP 127.0.0.1, and no Service is ever given an endpoint off loopback.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# ------------------------------------------------------------------------------------------
# Layout
# ------------------------------------------------------------------------------------------
E2E_DIR="$K8S_DIR/$K8S_VERSION/e2e"
E2E_WRAPPER_DIR="$E2E_DIR/wrapper"
E2E_BIN_DIR="$E2E_DIR/bin"
E2E_STAMP="$E2E_BIN_DIR/.built"
E2E_BUILD_LOG="$LOG_DIR/e2e-build.log"
E2E_IMAGES_LOG="$LOG_DIR/e2e-images.log"
E2E_IMAGE_DIR="$CRILET_DEV/e2e/images"
E2E_OCI="$E2E_IMAGE_DIR/oci"
E2E_IMAGE_STAMP="$E2E_IMAGE_DIR/inputs.sha256"
E2E_REPO_LIST="$CRILET_DEV/e2e/repo-list.yaml"
# The node.
E2E_NODE=crilet-e2e
E2E_NODE_PORT=10350
E2E_NODE_DIR="$CRILET_DEV/e2e/node"
E2E_RUN="$CRILET_RUN/e2e"
E2E_PIDFILE="$E2E_RUN/crilet.pid"
E2E_SOCK="$E2E_RUN/crilet.sock"
E2E_CRILET_LOG="$LOG_DIR/e2e-crilet.log"
CRILET_BIN="$REPO_ROOT/target/release/crilet"
# Namespaces the e2e framework creates carry this label (framework.CreateTestingNS).
E2E_NS_LABEL=e2e-framework
E2E_LOCK="$CRILET_RUN/e2e-run.lock"

E2E_EPOCH=1970-01-01T00:00:00Z
E2E_HISTORY=(--history.created "$E2E_EPOCH" --history.author crilet-hack-e2e)

FOCUS='\[sig-node\].*\[Conformance\]'
SKIP=''
LIMIT=0
NODES=1
TIMEOUT=3h
CRILET_BIN_ARG=""

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }

# lib.sh's k8s_go runs niced here: these builds take long.
# shellcheck disable=SC2034  # read by k8s_go
K8S_GO_NICE=10

# ------------------------------------------------------------------------------------------
# Build: e2e.test, ginkgo, agnhost
# ------------------------------------------------------------------------------------------
# e2e_recipe — what the build depends on besides the module version (the stamp's content).
e2e_recipe() {
    { declare -f prepare_e2e_wrapper build_e2e go_wrapper_module go_wrapper_build k8s_go k8s_ldflags
        echo "$K8S_VERSION $(go version)"; } | sha256sum | cut -d' ' -f1
}

e2e_built() {
    [ -x "$E2E_BIN_DIR/e2e.test" ] && [ -x "$E2E_BIN_DIR/ginkgo" ] && [ -x "$E2E_BIN_DIR/agnhost" ] &&
        [ "$(cat "$E2E_STAMP" 2>/dev/null)" = "$(e2e_recipe)" ]
}

# k8s_module_dir — where the module cache holds k8s.io/kubernetes at the pinned version.
k8s_module_dir() {
    k8s_go mod download -json "$K8S_MODULE@$K8S_VERSION" 2>>"$E2E_BUILD_LOG" | jq -r '.Dir // empty'
}

# prepare_e2e_wrapper — a second wrapper module beside hack/cluster.sh's (never the same one:
# the cluster's build must not change under it). Its go.mod takes the cluster wrapper's go,
# godebug, require and staging `replace` lines (hack/cluster.sh generates them; it is run
# first when they are missing); its tools.go imports test/e2e, everything test/e2e's
# e2e_test.go imports (so `go mod tidy` keeps the test binary's dependencies), agnhost and
# the ginkgo CLI.
prepare_e2e_wrapper() {
    local dir imports pkgs
    [ -f "$E2E_WRAPPER_DIR/.tidy-done" ] && return 0
    if [ ! -f "$K8S_WRAPPER_DIR/.tidy-done" ]; then
        log "hack/cluster.sh's wrapper module is missing; building the control plane first"
        bash "$HACK_DIR/cluster.sh" build 8>&-
    fi
    dir="$(k8s_module_dir)"
    [ -f "$dir/test/e2e/e2e_test.go" ] || die "no test/e2e/e2e_test.go in $K8S_MODULE@$K8S_VERSION ($dir); see $E2E_BUILD_LOG"
    # The quoted paths of e2e_test.go's import block (blank, named and plain imports alike).
    imports="$(awk '/^import \(/ {b=1; next} b && /^\)/ {exit} b' "$dir/test/e2e/e2e_test.go" |
        sed -n 's#^[[:space:]]*\([A-Za-z0-9_.]*[[:space:]]\)\{0,1\}"\([^"]*\)".*#\2#p' | LC_ALL=C sort -u)"
    [ "$(grep -c "^$K8S_MODULE/test/e2e/" <<<"$imports")" -gt 10 ] ||
        die "could not read the imports of $dir/test/e2e/e2e_test.go"
    log "generating the e2e wrapper module in $E2E_WRAPPER_DIR ($(wc -l <<<"$imports") imports of test/e2e's test)"
    mapfile -t pkgs < <(printf '%s\n' "$K8S_MODULE/test/e2e" "$K8S_MODULE/test/images/agnhost" \
        github.com/onsi/ginkgo/v2/ginkgo $imports | LC_ALL=C sort -u)
    go_wrapper_module --go-sum "$K8S_WRAPPER_DIR/go.sum" k8s_go "$E2E_WRAPPER_DIR" "$E2E_BUILD_LOG" \
        "what hack/e2e.sh builds" "${pkgs[@]}" <<EOF
// Generated by hack/e2e.sh from hack/cluster.sh's wrapper: builds $K8S_MODULE $K8S_VERSION's e2e.test.
module crilet.dev/k8s-e2e-build
$(grep -v '^module \|^//' "$K8S_WRAPPER_DIR/go.mod")
EOF
}

build_e2e() {
    local t0=$SECONDS t ldflags
    if e2e_built; then
        log "e2e.test, ginkgo and agnhost $K8S_VERSION already built ($E2E_BIN_DIR)"
        return 0
    fi
    command -v go >/dev/null || die "go is not installed"
    command -v jq >/dev/null || die "jq is not installed (run hack/setup.sh)"
    mkdir -p "$LOG_DIR" "$E2E_BIN_DIR"
    printf '\n[%s] building e2e.test, ginkgo, agnhost\n' "$(date '+%F %T')" >>"$E2E_BUILD_LOG"
    prepare_e2e_wrapper
    ldflags="$(k8s_ldflags)"
    t=$SECONDS
    log "building e2e.test $K8S_VERSION (log $E2E_BUILD_LOG; cold: 10-20 min on 2 cores)"
    go_wrapper_build k8s_go "$E2E_WRAPPER_DIR" "$E2E_BUILD_LOG" "$E2E_BIN_DIR/e2e.test" "$K8S_MODULE/test/e2e" \
        test -c -trimpath -ldflags "$ldflags"
    log "built e2e.test in $((SECONDS - t))s"
    t=$SECONDS
    go_wrapper_build k8s_go "$E2E_WRAPPER_DIR" "$E2E_BUILD_LOG" "$E2E_BIN_DIR/agnhost" "$K8S_MODULE/test/images/agnhost" \
        build -trimpath -ldflags "$ldflags"
    go_wrapper_build k8s_go "$E2E_WRAPPER_DIR" "$E2E_BUILD_LOG" "$E2E_BIN_DIR/ginkgo" github.com/onsi/ginkgo/v2/ginkgo \
        build -trimpath -ldflags "-s -w"
    log "built agnhost and ginkgo in $((SECONDS - t))s"
    e2e_recipe >"$E2E_STAMP"
    log "e2e binaries $K8S_VERSION built in $((SECONDS - t0))s ($E2E_BIN_DIR)"
}

# ------------------------------------------------------------------------------------------
# Test images (local registry only)
# ------------------------------------------------------------------------------------------
# Every image the run provides: REPOSITORY TAG (in the local registry).
E2E_IMAGES=(
    "e2e-test-images/busybox 1.37.0-1"
    "pause 3.10.2"
    "e2e-test-images/agnhost 2.63.0"
    "e2e-test-images/agnhost 2.55"
)

# The registry list handed to e2e.test (KUBE_TEST_REPO_LIST, test/utils/image/manifest.go):
# every registry the suite knows maps into the local registry, except the deliberately
# invalid one (specs that expect a failed pull keep it).
write_repo_list() {
    mkdir -p "$(dirname "$E2E_REPO_LIST")"
    cat >"$E2E_REPO_LIST" <<EOF
promoterE2eRegistry: $REGISTRY/e2e-test-images
buildImageRegistry: $REGISTRY/build-image
gcEtcdRegistry: $REGISTRY
gcRegistry: $REGISTRY
sigStorageRegistry: $REGISTRY/sig-storage
privateRegistry: $REGISTRY/k8s-authenticated-test
dockerLibraryRegistry: $REGISTRY/library
cloudProviderGcpRegistry: $REGISTRY/cloud-provider-gcp
invalidRegistry: invalid.registry.k8s.io/invalid
EOF
}

# Debian sid's busybox-static, unpacked (hack/lib.sh's sid_unpack: apt-get download, dpkg-deb
# -x; never installed) into $E2E_BUSYBOX_DIR/root, its Debian version in $E2E_BUSYBOX_DIR/version.
# Not bookworm's (1.35, hack/setup.sh's busybox:1.36): its ash drops environment variables
# whose names are not shell identifiers (`data-1=value-1` from envFrom never reaches `env`),
# which upstream's busybox 1.37 image keeps and several specs check.
E2E_BUSYBOX_DIR="$E2E_IMAGE_DIR/busybox-static"

ensure_sid_busybox() {
    [ -x "$E2E_BUSYBOX_DIR/root/usr/bin/busybox" ] && return 0
    local version
    sid_find version busybox-static
    [ -n "$version" ] || die "Debian sid does not offer busybox-static"
    sid_unpack busybox-static "$version" "$E2E_BUSYBOX_DIR/root"
    "$E2E_BUSYBOX_DIR/root/usr/bin/busybox" true || die "sid's busybox-static does not run here"
    echo "$version" >"$E2E_BUSYBOX_DIR/version"
    log "unpacked busybox-static $version from Debian sid into $E2E_BUSYBOX_DIR"
}

# build_busybox_image — hack/setup.sh's build_busybox recipe (busybox-static + applet links,
# /etc/passwd and /etc/group, PATH, CMD sh) with sid's busybox-static.
build_busybox_image() {
    local b="$E2E_IMAGE_DIR/bundle" r applet bb="$E2E_BUSYBOX_DIR/root/usr/bin/busybox"
    rm -rf "$b"
    umoci new --image "$E2E_OCI:busybox"
    umoci unpack --rootless --image "$E2E_OCI:busybox" "$b"
    r="$b/rootfs"
    mkdir -p "$r/bin" "$r/etc" "$r/root" "$r/proc" "$r/sys" "$r/dev" "$r/var"
    install -d -m 1777 "$r/tmp"
    install -m 0755 "$bb" "$r/bin/busybox"
    for applet in $("$bb" --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$r/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$r/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
    find "$r" -exec touch -h -d @0 {} +
    umoci repack "${E2E_HISTORY[@]}" \
        --history.created_by "COPY busybox-static $(cat "$E2E_BUSYBOX_DIR/version") /bin (+applet links, /etc)" \
        --image "$E2E_OCI:busybox" "$b"
    umoci config --no-history --image "$E2E_OCI:busybox" --created "$E2E_EPOCH" \
        --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --config.cmd sh
    rm -rf "$b"
}

e2e_skopeo() { skopeo --insecure-policy "$@"; }

# build_agnhost_image MODDIR — hack/setup.sh's busybox (busybox-static) plus what upstream's
# test/images/agnhost/Dockerfile adds that a test may look at: /agnhost and the agnhost-2
# link, /uploads, porter's localhost.crt/.key in /, the user and group defined in the image;
# ENTRYPOINT ["/agnhost"], CMD ["pause"]. (Upstream's base is alpine with bind-tools, curl,
# netcat, iproute2, iperf, bash and util-linux: busybox's applets stand in for what it has.)
build_agnhost_image() {
    local mod="$1" b="$E2E_IMAGE_DIR/bundle" r
    rm -rf "$b"
    umoci unpack --rootless --image "$E2E_OCI:busybox" "$b"
    r="$b/rootfs"
    install -m 0755 "$E2E_BIN_DIR/agnhost" "$r/agnhost"
    ln -sf agnhost "$r/agnhost-2"
    mkdir -p "$r/uploads" "$r/home/user-defined-in-image"
    install -m 0644 "$mod/test/images/agnhost/porter/localhost.crt" "$r/localhost.crt"
    install -m 0644 "$mod/test/images/agnhost/porter/localhost.key" "$r/localhost.key"
    echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>"$r/etc/passwd"
    printf '%s\n' 'user-defined-in-image:x:1000:' 'group-defined-in-image:x:50000:user-defined-in-image' >>"$r/etc/group"
    chown 1000:1000 "$r/home/user-defined-in-image"
    find "$r" -exec touch -h -d @0 {} +
    umoci repack "${E2E_HISTORY[@]}" --history.created_by "ADD agnhost $K8S_VERSION (test/images/agnhost)" \
        --image "$E2E_OCI:agnhost-2.63.0" "$b"
    umoci config --no-history --image "$E2E_OCI:agnhost-2.63.0" --created "$E2E_EPOCH" \
        --config.entrypoint /agnhost --clear config.cmd --config.cmd pause \
        --config.exposedports 80/tcp --config.exposedports 8080/tcp --config.exposedports 8081/tcp \
        --config.exposedports 9376/tcp --config.exposedports 5000/tcp
    # AgnhostPrev: the same binary; a label makes it another image (another digest), as specs
    # that switch between the two expect.
    umoci config --no-history --image "$E2E_OCI:agnhost-2.63.0" --tag agnhost-2.55 \
        --created "$E2E_EPOCH" --config.label "dev.crilet.e2e.tag=2.55"
    rm -rf "$b"
}

e2e_images_inputs() {
    {
        declare -f build_busybox_image build_agnhost_image build_images write_repo_list
        cat "$E2E_BUSYBOX_DIR/version"
        sha256sum "$E2E_BUSYBOX_DIR/root/usr/bin/busybox"
        echo "${E2E_IMAGES[*]} $E2E_EPOCH ${E2E_HISTORY[*]}"
        umoci --version
        sha256sum "$E2E_BIN_DIR/agnhost"
        registry_digest pause 3.10
    } | sha256sum | cut -d' ' -f1
}

image_record() { echo "$E2E_IMAGE_DIR/digests/${1//\//_}-$2"; }

images_current() {
    local want="$1" img name tag rec
    [ "$(cat "$E2E_IMAGE_STAMP" 2>/dev/null)" = "$want" ] || return 1
    for img in "${E2E_IMAGES[@]}"; do
        read -r name tag <<<"$img"
        rec="$(image_record "$name" "$tag")"
        [ -s "$rec" ] && [ "$(registry_digest "$name" "$tag")" = "$(cat "$rec")" ] || return 1
    done
}

build_images() {
    local want mod img name tag rec
    registry_answers || die "the local registry does not answer on $REGISTRY_LISTEN (run hack/setup.sh)"
    [ -n "$(registry_digest pause 3.10)" ] || die "the registry lacks hack/setup.sh's pause:3.10 (run hack/setup.sh)"
    ensure_sid_busybox
    write_repo_list
    want="$(e2e_images_inputs)"
    if images_current "$want"; then
        log "e2e test images up to date in $REGISTRY (inputs ${want:0:12})"
        return 0
    fi
    mod="$(k8s_module_dir)"
    [ -d "$mod/test/images/agnhost" ] || die "no test/images/agnhost in $mod"
    log "building the e2e test images into $REGISTRY (log $E2E_IMAGES_LOG)"
    rm -rf "$E2E_OCI" "$E2E_IMAGE_DIR/digests" "$E2E_IMAGE_STAMP"
    mkdir -p "$E2E_IMAGE_DIR/digests" "$LOG_DIR"
    {
        # pause: hack/setup.sh's image, copied under the upstream name.
        e2e_skopeo copy -q --src-tls-verify=false --dest-tls-verify=false \
            "docker://$REGISTRY/pause:3.10" "docker://$REGISTRY/pause:3.10.2"
        umoci init --layout "$E2E_OCI"
        build_busybox_image
        build_agnhost_image "$mod"
        umoci gc --layout "$E2E_OCI"
        e2e_skopeo copy -q --dest-tls-verify=false "oci:$E2E_OCI:busybox" \
            "docker://$REGISTRY/e2e-test-images/busybox:1.37.0-1"
        for tag in 2.63.0 2.55; do
            e2e_skopeo copy -q --dest-tls-verify=false "oci:$E2E_OCI:agnhost-$tag" \
                "docker://$REGISTRY/e2e-test-images/agnhost:$tag"
        done
    } >>"$E2E_IMAGES_LOG" 2>&1 || { tail -n 20 "$E2E_IMAGES_LOG" >&2; die "building the e2e images failed; see $E2E_IMAGES_LOG"; }
    for img in "${E2E_IMAGES[@]}"; do
        read -r name tag <<<"$img"
        rec="$(image_record "$name" "$tag")"
        registry_digest "$name" "$tag" >"$rec"
        [ -s "$rec" ] || die "the registry does not serve $REGISTRY/$name:$tag after the push"
        log "pushed $REGISTRY/$name:$tag $(cat "$rec")"
        # A tag our containerd pulled before (an earlier build) would be used as it is
        # (IfNotPresent): forget it, so the next pull gets what was just pushed.
        if [ "$(ctrk images ls "name==$REGISTRY/$name:$tag" 2>/dev/null | awk 'NR > 1 {print $3}')" != "$(cat "$rec")" ]; then
            ctrk images rm "$REGISTRY/$name:$tag" >/dev/null 2>&1 || true
        fi
    done
    echo "$want" >"$E2E_IMAGE_STAMP"
}

# ------------------------------------------------------------------------------------------
# The crilet node
# ------------------------------------------------------------------------------------------
kc() { "$KUBECTL_BIN" --kubeconfig "$CLUSTER_ADMIN_KUBECONFIG" --cache-dir "$CRILET_DEV/e2e/kubectl-cache" --request-timeout 30s "$@"; }
cluster_answers() { [ -x "$KUBECTL_BIN" ] && [ -s "$CLUSTER_ADMIN_KUBECONFIG" ] && kc get --raw /readyz >/dev/null 2>&1; }
e2e_node_pid() { live_pid "$E2E_PIDFILE" "$E2E_SOCK"; }

# node_pods — "namespace/name uid" of every API pod bound to our node.
node_pods() {
    kc get pods -A --field-selector "spec.nodeName=$E2E_NODE" \
        -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.metadata.uid}{"\n"}{end}'
}

no_node_pods() { [ -z "$(node_pods 2>/dev/null || echo x)" ]; }

# node_state_unmount — unmount whatever is mounted under the node's directory (emptyDir or
# volume mounts a stopped agent may leave; only paths of ours).
node_state_unmount() {
    local m
    for m in $(findmnt -rn -o TARGET | grep -F "$E2E_NODE_DIR/" | LC_ALL=C sort -r); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || warn "could not unmount $m"
    done
}

stop_node() {
    adopt "$E2E_PIDFILE" crilet "$E2E_SOCK" || true
    # crilet leaves its containers running when it stops (like the kubelet).
    stop_pid "$E2E_PIDFILE" "$E2E_SOCK" "crilet node $E2E_NODE" 20
    rm -f "$E2E_SOCK"
}

# drain_node SECONDS — delete every pod bound to our node (the agent kills their containers
# and removes them from the API), wait for them to go; force-delete what is left.
drain_node() {
    local secs="$1" left
    cluster_answers || return 0
    left="$(node_pods 2>/dev/null || true)"
    [ -n "$left" ] || return 0
    log "deleting the $(grep -c . <<<"$left") pod(s) left on $E2E_NODE"
    kc delete pods -A --field-selector "spec.nodeName=$E2E_NODE" --grace-period=5 --wait=false >/dev/null 2>&1 || true
    if e2e_node_pid >/dev/null; then
        wait_for "$secs" "the pods on $E2E_NODE to be gone" no_node_pods || true
    fi
    left="$(node_pods 2>/dev/null || true)"
    if [ -n "$left" ]; then
        warn "force-deleting $(grep -c . <<<"$left") pod(s) on $E2E_NODE the agent did not remove (their containers stay for hack/teardown.sh)"
        kc delete pods -A --field-selector "spec.nodeName=$E2E_NODE" --force --grace-period=0 >/dev/null 2>&1 || true
        return 1
    fi
}

# delete_e2e_namespaces [KEEP-FILE] — the namespaces the e2e framework made (label
# e2e-framework), except those listed in KEEP-FILE (there before this run).
delete_e2e_namespaces() {
    local keep="${1:-/dev/null}" ns todo=()
    cluster_answers || return 0
    for ns in $(kc get ns -l "$E2E_NS_LABEL" -o jsonpath='{.items[*].metadata.name}' 2>/dev/null); do
        grep -qxF "$ns" "$keep" 2>/dev/null || todo+=("$ns")
    done
    [ "${#todo[@]}" -gt 0 ] || return 0
    log "deleting ${#todo[@]} e2e namespace(s)"
    kc delete ns "${todo[@]}" --wait=false >/dev/null 2>&1 || true
}

# start_node — our crilet joined as $E2E_NODE, Ready and untainted.
start_node() {
    local env_out t0=$SECONDS
    [ -x "$CRILET_BIN" ] || die "$CRILET_BIN is missing"
    . "$ENV_FILE"
    env_out="$(bash "$HACK_DIR/cluster.sh" node "$E2E_NODE" 8>&-)" || die "hack/cluster.sh node $E2E_NODE failed"
    local -A id=()
    local line
    while IFS='=' read -r k v; do [ -n "$k" ] && id[$k]="$v"; done <<<"$env_out"
    for line in CRILET_NODE_KUBECONFIG CRILET_NODE_TLS_CERT CRILET_NODE_TLS_KEY CRILET_CLUSTER_CA; do
        [ -s "${id[$line]:-}" ] || die "hack/cluster.sh node gave no $line"
    done
    # What an earlier run may have left: its agent, pods, Node.
    if e2e_node_pid >/dev/null; then drain_node 60 || true; stop_node; fi
    kc delete pods -A --field-selector "spec.nodeName=$E2E_NODE" --force --grace-period=0 >/dev/null 2>&1 || true
    kc delete node "$E2E_NODE" --wait=true >/dev/null 2>&1 || true
    [ -z "$(ss -Hltn "sport = :$E2E_NODE_PORT" 2>/dev/null)" ] ||
        die "port $E2E_NODE_PORT (the e2e node's kubelet API) is taken: $(ss -Hltnp "sport = :$E2E_NODE_PORT" | head -n1)"
    node_state_unmount
    rm -rf "$E2E_NODE_DIR"
    mkdir -p "$E2E_NODE_DIR/manifests" "$E2E_NODE_DIR/root" "$E2E_NODE_DIR/pod-logs" "$E2E_NODE_DIR/containers" "$E2E_RUN"
    chmod 0755 "$E2E_NODE_DIR/manifests"
    printf '\n[%s] starting crilet node %s\n' "$(date '+%F %T')" "$E2E_NODE" >>"$E2E_CRILET_LOG"
    # 8>&-: the agent must not inherit our lock.
    start_daemon "$E2E_PIDFILE" "$E2E_CRILET_LOG" "$CRILET_BIN" run \
        --container-runtime-endpoint "$CRILET_CONTAINERD_ENDPOINT" \
        --pod-manifest-path "$E2E_NODE_DIR/manifests" --root-dir "$E2E_NODE_DIR/root" \
        --pod-logs-dir "$E2E_NODE_DIR/pod-logs" --container-logs-dir "$E2E_NODE_DIR/containers" \
        --control-socket "$E2E_SOCK" \
        --kubeconfig "${id[CRILET_NODE_KUBECONFIG]}" --node-ip 127.0.0.1 --port "$E2E_NODE_PORT" \
        --tls-cert-file "${id[CRILET_NODE_TLS_CERT]}" --tls-private-key-file "${id[CRILET_NODE_TLS_KEY]}" \
        --client-ca-file "${id[CRILET_CLUSTER_CA]}" \
        --node-labels "crilet.io/e2e=true" --node-name "$E2E_NODE" 8>&-
    log "crilet node $E2E_NODE started (pid $(cat "$E2E_PIDFILE"), kubelet API 127.0.0.1:$E2E_NODE_PORT, log $E2E_CRILET_LOG)"
    if ! wait_for 120 "node $E2E_NODE to be Ready and untainted" node_ready; then
        tail -n 20 "$E2E_CRILET_LOG" >&2
        die "node $E2E_NODE did not become Ready (untainted) within 120s; see $E2E_CRILET_LOG"
    fi
    log "node $E2E_NODE Ready after $((SECONDS - t0))s"
}

node_ready() {
    e2e_node_pid >/dev/null || return 1
    local n
    n="$(kc get node "$E2E_NODE" -o json 2>/dev/null)" || return 1
    jq -e '([.status.conditions[]? | select(.type == "Ready" and .status == "True")] | length == 1)
        and ([.spec.taints[]? | select(.key | startswith("node.kubernetes.io/"))] | length == 0)' <<<"$n" >/dev/null
}

# The run's pods go to our node only: other crilet nodes (tests, benchmarks) may be Ready in
# the same cluster, and the scheduler would spread the suite's pods over them. A
# MutatingAdmissionPolicy (admissionregistration.k8s.io/v1) adds the node selector
# crilet.io/e2e=true (our node's label) to every pod created in an e2e namespace (label
# e2e-framework), and points a pod that names another node (spec.nodeName, or a required
# node affinity on metadata.name, as e2epod.SetNodeSelection makes it) at ours, as a one-node
# cluster would.
PIN_POLICY=crilet-e2e-pin
pin_policy() {
    cat <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: $PIN_POLICY
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    namespaceSelector:
      matchExpressions: [{key: $E2E_NS_LABEL, operator: Exists}]
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        (has(object.spec.nodeSelector)
          ? [JSONPatch{op: "add", path: "/spec/nodeSelector/crilet.io~1e2e", value: "true"}]
          : [JSONPatch{op: "add", path: "/spec/nodeSelector", value: {"crilet.io/e2e": "true"}}])
        + (has(object.spec.nodeName) && object.spec.nodeName != "" && object.spec.nodeName != "$E2E_NODE"
          ? [JSONPatch{op: "replace", path: "/spec/nodeName", value: "$E2E_NODE"}] : [])
        + (has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity)
            && has(object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution)
            && object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.exists(t,
                 has(t.matchFields) && t.matchFields.exists(f, f.key == "metadata.name"))
          ? [JSONPatch{op: "replace", path: "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
              value: Object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution{
                nodeSelectorTerms: [Object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms{
                  matchFields: [Object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.matchFields{
                    key: "metadata.name", operator: "In", values: ["$E2E_NODE"]}]}]}}] : [])
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: $PIN_POLICY
spec:
  policyName: $PIN_POLICY
EOF
}
pin_pods() {
    pin_policy | kc apply -f - >/dev/null || die "could not create the MutatingAdmissionPolicy $PIN_POLICY"
    # Admission picks a new policy up within a second or so.
    sleep 3
    log "pods in e2e namespaces are pinned to $E2E_NODE (MutatingAdmissionPolicy $PIN_POLICY)"
}
unpin_pods() {
    cluster_answers || return 0
    kc delete mutatingadmissionpolicybinding "$PIN_POLICY" --ignore-not-found >/dev/null 2>&1 || true
    kc delete mutatingadmissionpolicy "$PIN_POLICY" --ignore-not-found >/dev/null 2>&1 || true
}

# other_schedulable_nodes — Ready, untainted nodes besides ours (pods of the run may land there).
other_schedulable_nodes() {
    kc get nodes -o json | jq -r --arg me "$E2E_NODE" '.items[] | select(.metadata.name != $me)
        | select(.spec.unschedulable != true)
        | select([.status.conditions[]? | select(.type == "Ready" and .status == "True")] | length == 1)
        | select([.spec.taints[]? | select(.effect == "NoSchedule" or .effect == "NoExecute")] | length == 0)
        | .metadata.name'
}

# ------------------------------------------------------------------------------------------
# The suite
# ------------------------------------------------------------------------------------------
# e2e_env CMD... — CMD with the image list and no proxy (everything is on loopback or the
# pod bridge).
e2e_env() {
    env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u all_proxy -u ALL_PROXY \
        KUBE_TEST_REPO_LIST="$E2E_REPO_LIST" NO_PROXY='*' no_proxy='*' "$@"
}

# spec_texts JSONREPORT — the full text of every spec the report ran (or, for a dry run,
# selected), in run order.
spec_texts() {
    jq -r '.[].SpecReports[]? | select(.LeafNodeType == "It") | select(.State != "skipped" and .State != "pending")
        | ((.ContainerHierarchyTexts // []) + [.LeafNodeText] | join(" "))' "$1"
}

# select_specs DIR — dry-run e2e.test with the focus and skip; DIR/selected.txt gets the
# specs, and with --limit N only the first N are kept (FOCUS_ARGS then names each).
select_specs() {
    local dir="$1" dry="$1/dry-run.json" n
    mkdir -p "$dir"
    e2e_env "$E2E_BIN_DIR/e2e.test" --ginkgo.dry-run --ginkgo.no-color --ginkgo.focus "$FOCUS" \
        ${SKIP:+--ginkgo.skip "$SKIP"} --ginkgo.json-report "$dry" --provider skeleton \
        --kubeconfig "$CLUSTER_ADMIN_KUBECONFIG" >"$dir/dry-run.log" 2>&1 ||
        { tail -n 20 "$dir/dry-run.log" >&2; die "the dry run of e2e.test failed; see $dir/dry-run.log"; }
    spec_texts "$dry" | LC_ALL=C sort >"$dir/selected.txt"
    n="$(grep -c . "$dir/selected.txt" || true)"
    [ "$n" -gt 0 ] || die "no spec matches --focus '$FOCUS'${SKIP:+ --skip '$SKIP'}"
    FOCUS_ARGS=(--ginkgo.focus "$FOCUS")
    if [ "$LIMIT" -gt 0 ] && [ "$LIMIT" -lt "$n" ]; then
        head -n "$LIMIT" "$dir/selected.txt" >"$dir/selected.tmp"
        mv "$dir/selected.tmp" "$dir/selected.txt"
        FOCUS_ARGS=()
        local t suite
        # Ginkgo matches --focus against "SUITE-DESCRIPTION SPEC-TEXT".
        suite="$(jq -r '.[0].SuiteDescription' "$dry")"
        while IFS= read -r t; do
            # The exact text as a regular expression (ginkgo ORs repeated --focus flags).
            FOCUS_ARGS+=(--ginkgo.focus "^$(sed 's/[][\.*^$(){}?+|/]/\\&/g' <<<"$suite $t")\$")
        done <"$dir/selected.txt"
        log "$n specs match; running the first $LIMIT (--limit)"
    else
        log "$n specs selected"
    fi
    SELECTED="$(grep -c . "$dir/selected.txt")"
}

# summarize DIR — passed/failed/skipped over the selected specs (DIR/selected.txt) from
# ginkgo's JSON report, and each failed spec with the first lines of its failure; into
# DIR/summary.txt and on stdout. Status 1 unless something ran and nothing failed.
summarize() {
    local dir="$1" report="$1/report.json"
    [ -s "$report" ] || { warn "no JSON report in $dir (the suite did not finish)"; return 1; }
    jq -r --rawfile sel "$dir/selected.txt" '
        ($sel | split("\n") | map(select(length > 0))) as $want
        | [.[].SpecReports[]? | select(.LeafNodeType == "It")
            | . + {text: ((.ContainerHierarchyTexts // []) + [.LeafNodeText] | join(" "))}
            | select(.text as $t | $want | index($t))] as $s
        | ([$s[] | select(.State == "passed")] | length) as $p
        | ([$s[] | select(.State == "skipped" or .State == "pending")] | length) as $k
        | ([$s[] | select(.State != "passed" and .State != "skipped" and .State != "pending")]) as $f
        | "selected \($want | length)  passed \($p)  failed \($f | length)  skipped \($k)  not run \(($want | length) - ($s | length))",
          (.[].SpecReports[]? | select(.LeafNodeType != "It" and .State != "passed" and .State != "skipped")
            | "SUITE NODE \(.LeafNodeType) \(.State): \(.Failure.Message // "" | split("\n")[0:3] | join(" | "))"),
          ($f[] | "\n\(.State | ascii_upcase): \(.text)  (\(.RunTime / 1e9 | floor)s)\n    at \(.Failure.Location.FileName // "?" | sub(".*/test/e2e/"; "test/e2e/")):\(.Failure.Location.LineNumber // 0)\n    \(.Failure.Message // "" | split("\n") | map(select(length > 0)) | .[0:6] | join("\n    "))")
        ' "$report" | tee "$dir/summary.txt"
    head -n1 "$dir/summary.txt" | grep -q ' passed [1-9][0-9]*  failed 0  skipped [0-9]*  not run 0$'
}

# run_suite DIR — e2e.test (serial) or ginkgo -p (--nodes N) over the selection.
run_suite() {
    local dir="$1" rc=0 args
    args=(--kubeconfig "$CLUSTER_ADMIN_KUBECONFIG" --provider skeleton --report-dir "$dir"
        --kubectl-path "$KUBECTL_BIN" --allowed-not-ready-nodes=-1
        --dump-logs-on-failure=true)
    log "running $SELECTED spec(s) on node $E2E_NODE with $NODES process(es) (log $dir/e2e.log)"
    if [ "$NODES" -gt 1 ]; then
        e2e_env "$E2E_BIN_DIR/ginkgo" --nodes "$NODES" --timeout "$TIMEOUT" --no-color \
            "${FOCUS_ARGS[@]/--ginkgo./--}" ${SKIP:+--skip "$SKIP"} --json-report "$dir/report.json" \
            "$E2E_BIN_DIR/e2e.test" -- "${args[@]}" >"$dir/e2e.log" 2>&1 || rc=$?
    else
        e2e_env "$E2E_BIN_DIR/e2e.test" "${FOCUS_ARGS[@]}" ${SKIP:+--ginkgo.skip "$SKIP"} \
            --ginkgo.timeout "$TIMEOUT" --ginkgo.no-color --ginkgo.json-report "$dir/report.json" \
            "${args[@]}" >"$dir/e2e.log" 2>&1 || rc=$?
    fi
    return "$rc"
}

RUN_DIR=""
NS_BEFORE=""
cleanup_run() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$RUN_DIR" ]; then
        delete_e2e_namespaces "$NS_BEFORE" || true
        unpin_pods
        drain_node 180 || true
        stop_node
        if cluster_answers; then kc delete node "$E2E_NODE" --wait=false >/dev/null 2>&1 || true; fi
        node_state_unmount
        [ -n "$(findmnt -rn -o TARGET | grep -F "$E2E_NODE_DIR/")" ] || rm -rf "$E2E_NODE_DIR/root"
    fi
    exit "$rc"
}

cmd_run() {
    local t0 rc=0 others stamp
    lock
    # 8>&-: the control plane's daemons must not inherit our lock.
    bash "$HACK_DIR/cluster.sh" up 8>&- || die "hack/cluster.sh (up) failed"
    build_e2e
    build_images
    if [ -z "$CRILET_BIN_ARG" ]; then
        log "building crilet (cargo build --release)"
        (cd "$REPO_ROOT" && VERBOSE_LOG="$LOG_DIR/e2e-cargo.log" quietly nice -n 10 cargo build --release --bins 8>&-) ||
            die "cargo build --release failed; see $LOG_DIR/e2e-cargo.log"
    fi
    stamp="$(date -u +%Y%m%dT%H%M%SZ)"
    RUN_DIR="$LOG_DIR/e2e-$stamp"
    mkdir -p "$RUN_DIR"
    # The node runs a copy: a rebuild in the working tree during the run changes nothing.
    install -m 0755 "${CRILET_BIN_ARG:-$CRILET_BIN}" "$RUN_DIR/crilet"
    CRILET_BIN="$RUN_DIR/crilet"
    select_specs "$RUN_DIR"
    NS_BEFORE="$RUN_DIR/namespaces-before.txt"
    kc get ns -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' >"$NS_BEFORE"
    trap cleanup_run EXIT
    trap 'exit 130' INT TERM
    pin_pods
    start_node
    others="$(other_schedulable_nodes | paste -sd' ' || true)"
    if [ -n "$others" ]; then
        log "other schedulable nodes in the cluster: $others (the run's pods are pinned to $E2E_NODE)"
        echo "other schedulable nodes at start: $others" >"$RUN_DIR/other-nodes.txt"
    fi
    {
        echo "date: $(date -u '+%F %T UTC')"
        echo "crilet commit: $(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null)"
        echo "uncommitted changes: $(git -C "$REPO_ROOT" status --porcelain --untracked-files=no 2>/dev/null | awk '{print $2}' | paste -sd' ' || true)"
        echo "crilet: $("$CRILET_BIN" --version 2>/dev/null), binary ${CRILET_BIN_ARG:-$REPO_ROOT/target/release/crilet} (built $(date -u -r "${CRILET_BIN_ARG:-$REPO_ROOT/target/release/crilet}" '+%F %T UTC'), sha256 $(sha256sum "$CRILET_BIN" | cut -c1-16))"
        echo "kubernetes: $K8S_VERSION (control plane and e2e.test), runtime $CRILET_RUNTIME_VERSION"
        echo "focus: ${FOCUS_ARGS[*]:0:2}$([ "${#FOCUS_ARGS[@]}" -gt 2 ] && echo " ... (${SELECTED} specs, --limit $LIMIT)")"
        echo "skip: ${SKIP:-none}  nodes: $NODES"
    } >"$RUN_DIR/run-info.txt"
    t0=$SECONDS
    run_suite "$RUN_DIR" || rc=$?
    echo "e2e.test exit status $rc after $((SECONDS - t0))s" >>"$RUN_DIR/run-info.txt"
    log "e2e.test exited with status $rc after $((SECONDS - t0))s; report in $RUN_DIR"
    echo
    cat "$RUN_DIR/run-info.txt"
    summarize "$RUN_DIR" || rc=1
    echo
    echo "log: $RUN_DIR/e2e.log  junit: $RUN_DIR/junit_01.xml  agent log: $E2E_CRILET_LOG"
    return "$rc"
}

cmd_list() {
    local dir
    build_e2e
    write_repo_list
    dir="$(mktemp -d)"
    select_specs "$dir"
    cat "$dir/selected.txt"
    rm -rf "$dir"
}

# cmd_clean — everything a run may have left: the agent (by pid), e2e namespaces, the pods
# bound to the e2e node, the Node, the node's state.
cmd_clean() {
    delete_e2e_namespaces || true
    unpin_pods
    if e2e_node_pid >/dev/null; then drain_node 120 || true; fi
    stop_node
    if cluster_answers; then
        kc delete pods -A --field-selector "spec.nodeName=$E2E_NODE" --force --grace-period=0 >/dev/null 2>&1 || true
        kc delete node "$E2E_NODE" --wait=false >/dev/null 2>&1 || true
    fi
    node_state_unmount
    rm -rf "$E2E_NODE_DIR" "$E2E_RUN"
    log "e2e node $E2E_NODE stopped and its state removed"
}

lock() {
    mkdir -p "$CRILET_RUN"
    exec 8>"$E2E_LOCK"
    flock -n 8 || die "another hack/e2e.sh runs (lock $E2E_LOCK)"
}

cmd_build() { build_e2e; }
cmd_images() { build_e2e; build_images; }

main() {
    local cmd="${1:-run}"
    case "$cmd" in
        -h | --help) usage 0 ;;
        -v) CRILET_VERBOSE=1; shift; main "$@"; return ;;
        --*) cmd=run ;;
        *) [ $# -eq 0 ] || shift ;;
    esac
    while [ $# -gt 0 ]; do
        case "$1" in
            --focus) FOCUS="${2:?--focus needs a value}"; shift 2 ;;
            --skip) SKIP="${2:?--skip needs a value}"; shift 2 ;;
            --limit) LIMIT="${2:?--limit needs a value}"; shift 2 ;;
            --nodes) NODES="${2:?--nodes needs a value}"; shift 2 ;;
            --timeout) TIMEOUT="${2:?--timeout needs a value}"; shift 2 ;;
            --crilet-bin) CRILET_BIN_ARG="$(realpath "${2:?--crilet-bin needs a value}")"; shift 2 ;;
            -v) CRILET_VERBOSE=1; shift ;;
            -h | --help) usage 0 ;;
            *) echo "unknown argument: $1" >&2; usage ;;
        esac
    done
    [[ "$LIMIT" =~ ^[0-9]+$ ]] || die "--limit takes a number"
    [[ "$NODES" =~ ^[1-9][0-9]*$ ]] || die "--nodes takes a positive number"
    require_root
    case "$cmd" in
        run) cmd_run ;;
        build) cmd_build ;;
        images) cmd_images ;;
        list) cmd_list ;;
        clean) cmd_clean ;;
        *) echo "unknown command: $cmd" >&2; usage ;;
    esac
}

# One line: bash reads a script as it runs it, so nothing after this is ever read.
main "$@"; exit
