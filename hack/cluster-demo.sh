#!/usr/bin/env bash
# hack/cluster-demo.sh — crilet as a node of a real Kubernetes cluster, in one command.
#
# Usage: hack/cluster-demo.sh [-v]      (as root; rerunnable)
# Starts the control plane of hack/cluster.sh (kube-apiserver, controller-manager, scheduler
# v1.36 built from their Go module on a cold machine, then cached), writes the identity of node
# `crilet-demo` (system:node:crilet-demo), runs hack/demo.sh with crilet joined to the cluster
# (the static example pods keep running and get mirror pods), waits for the Node to be Ready,
# applies examples/cluster/hello.yaml (a ConfigMap and a 3-replica Deployment) in namespace
# `demo`, waits for the rollout, and prints kubectl commands to try.
# Stop everything with hack/teardown.sh.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

check_prerequisites
VERBOSE=()
for arg in "$@"; do
    case "$arg" in
        -v | --verbose) VERBOSE=(-v); CRILET_VERBOSE=1; export CRILET_VERBOSE ;;
        *) die "unknown argument: $arg (usage: $0 [-v])" ;;
    esac
done
NODE=crilet-demo
PORT="${CRILET_DEMO_KUBELET_PORT:-10250}"
trap 'status=$?; [ "$status" = 0 ] || warn "the cluster demo failed (exit $status); what it started keeps running: stop it with hack/teardown.sh"' EXIT

# The control plane (setup first: cluster.sh shares its sid apt state).
bash "$HACK_DIR/setup.sh"
bash "$HACK_DIR/cluster.sh"
set -a
# shellcheck disable=SC1090
. "$ENV_FILE"
# shellcheck disable=SC1091
. "$CLUSTER_ENV_FILE"
set +a
bash "$HACK_DIR/cluster.sh" node "$NODE" >/dev/null
NODE_DIR="$CLUSTER_NODES_DIR/$NODE"
kc() { "$CRILET_KUBECTL" --kubeconfig "$CRILET_CLUSTER_KUBECONFIG" --cache-dir "$CRILET_KUBECTL_CACHE_DIR" "$@"; }

# The demo's agent, joined: the node IP is loopback (the whole cluster lives on 127.0.0.1).
DEMO_EXTRA_FLAGS="--kubeconfig $NODE_DIR/kubeconfig --node-name $NODE --node-ip 127.0.0.1 --port $PORT"
DEMO_EXTRA_FLAGS+=" --tls-cert-file $NODE_DIR/kubelet.crt --tls-private-key-file $NODE_DIR/kubelet.key"
DEMO_EXTRA_FLAGS+=" --client-ca-file $CRILET_CLUSTER_CA"
export DEMO_EXTRA_FLAGS
bash "$HACK_DIR/demo.sh" "${VERBOSE[@]}" >/dev/null

log "waiting for node $NODE to be Ready and schedulable"
kc wait --for=condition=Ready "node/$NODE" --timeout=90s >/dev/null
deadline=$((SECONDS + 90))
until [ -z "$(kc get node "$NODE" -o jsonpath='{.spec.taints[?(@.key=="node.kubernetes.io/not-ready")].key}')" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "node $NODE still has the not-ready taint after 90 s"
    sleep 1
done

kc get namespace demo >/dev/null 2>&1 || kc create namespace demo >/dev/null
sed "s|\${CRILET_IMAGE_WEB_V1}|$CRILET_IMAGE_WEB_V1|g" "$REPO_ROOT/examples/cluster/hello.yaml" |
    kc -n demo apply -f - >/dev/null
log "waiting for deployment demo/hello (3 replicas on $NODE)"
kc -n demo rollout status deployment/hello --timeout=120s >/dev/null ||
    die "the hello Deployment did not become available; see kubectl -n demo describe pods"

KUBECTL="$CRILET_KUBECTL --kubeconfig $CRILET_CLUSTER_KUBECONFIG"
printf '\n'
kc get nodes -o wide
printf '\n'
kc get pods -A -o wide
cat <<EOF

crilet is node $NODE of a real cluster (Kubernetes $CRILET_CLUSTER_VERSION on 127.0.0.1).
  kubectl:   alias kubectl='$KUBECTL'
  try:       kubectl -n demo get pods -o wide
             kubectl -n demo logs deploy/hello
             kubectl -n demo describe pod -l app=hello
             kubectl -n demo scale deployment/hello --replicas=5
             kubectl -n demo set image deployment/hello hello=$CRILET_IMAGE_WEB_V2
  the static example pods show as mirror pods: kubectl get pods -n default
  agent log: $CRILET_DEV/logs/crilet.log
Stop everything (agent, pods, control plane, containerd, registry): hack/teardown.sh
EOF
