#!/usr/bin/env bash
# hack/cluster.sh — a real Kubernetes control plane on 127.0.0.1 for crilet to join as a node.
#
# Usage: hack/cluster.sh [up]            build what is missing, then start (or repair) the cluster
#        hack/cluster.sh down [--purge]  stop it (by pid) and remove its runtime state and etcd
#                                        data; --purge also removes the PKI, kubeconfigs and node
#                                        identities (hack/teardown.sh does that)
#        hack/cluster.sh node NAME       write node NAME's identity (client cert + kubeconfig,
#                                        kubelet-API serving cert) and print the paths
#        hack/cluster.sh bootstrap-kubeconfig NAME
#                                        write a bootstrap kubeconfig (server, CA, the cluster's
#                                        bootstrap token) for node NAME to join by TLS bootstrap
#        hack/cluster.sh kubeadm         make the cluster joinable by `kubeadm join` as kubeadm
#                                        init makes it (its own phases, see cmd_kubeadm) and
#                                        print the join's endpoint, token and CA hash
#        hack/cluster.sh build [kubelet] build the binaries (metrics-server's too) and fetch
#                                        etcd/kubectl only; with
#                                        `kubelet` also the upstream kubelet (for benchmarks)
#        hack/cluster.sh metrics-server [stop]
#                                        build and start metrics-server (on demand: it costs CPU)
#                                        and register the metrics.k8s.io APIService; wait until
#                                        it is Available (`kubectl top`, HPAs); `stop` removes
#                                        the APIService and stops it
#        hack/cluster.sh status          what runs and answers (exit 1 unless all of it)
#   -v / CRILET_VERBOSE=1: show the build's output as it comes.
#   CRILET_CLUSTER_PROFILING=1: the API server serves /debug/pprof (to profile what a node's
#   requests cost it); `up` restarts it when this changes.
#   CRILET_CLUSTER_SIGNING_DURATION (default 3m): how long the certificates the
#   controller-manager signs for CSRs last (--cluster-signing-duration). Short, so that every
#   node that bootstraps also rotates its client certificate within minutes (the rotation test
#   relies on it). A CSR's expirationSeconds cannot shorten it enough: the signer raises any
#   request under 10 minutes to 10 minutes. With 3m a certificate is valid from 5 minutes
#   before signing (the signer backdates) to 3 minutes after; a node rotates at 70-90 % of
#   those 8 minutes, 0.6 to 2.2 minutes after it got it. `up` restarts the controller-manager
#   when this changes. Certificates `node` makes (openssl) are not affected.
#
# What `up` makes (as root; every step is skipped when already done):
#   1. kube-apiserver, kube-controller-manager, kube-scheduler v1.36.3 built from the
#      k8s.io/kubernetes Go module through a generated wrapper module (lib.sh build_k8s,
#      K8S_WRAPPER_DIR: one `replace k8s.io/X => k8s.io/X v0.36.3` per staging module), CGO off,
#      into /var/lib/crilet-dev/k8s/v1.36.3/bin, Go's caches in /var/lib/crilet-dev/k8s/go
#      (log: $LOG_DIR/cluster-build.log). A binary that reports the right version is not rebuilt.
#      metrics-server v0.8.0 likewise (lib.sh build_metrics_server, into
#      /var/lib/crilet-dev/k8s/metrics-server-v0.8.0/bin; started only by `metrics-server`).
#   2. etcd 3.5.30 (etcd-server) and kubectl 1.36.4+ds-1 from Debian sid: `apt-get download`
#      through hack/lib.sh's private sid apt state (sid_unpack), `dpkg-deb -x` into
#      /var/lib/crilet-dev/k8s/sid (never installed on the system).
#   3. a PKI under /var/lib/crilet-dev/cluster/pki (openssl; ECDSA P-256 CA, PKCS#8 keys):
#      apiserver serving cert, admin client (CN=admin, O=system:masters), apiserver->kubelet
#      client (CN=kube-apiserver-kubelet-client, O=system:masters), RSA service-account keys,
#      the front proxy's own CA and the API server's proxy client (CN=front-proxy-client), and
#      metrics-server's serving cert;
#      admin.kubeconfig next to it (everything embedded as base64 data).
#   4. etcd (client 127.0.0.1:2479, peer :2480, --unsafe-no-fsync), kube-apiserver (:16443),
#      kube-controller-manager (:16257), kube-scheduler (:16259), each a detached process with
#      a pid file in /run/crilet-dev/cluster and a log $LOG_DIR/cluster-NAME.log; waits for
#      their health endpoints and for the `default` ServiceAccount and the kube-root-ca.crt
#      ConfigMap in namespace default;
#   5. TLS bootstrapping as kubeadm sets it up: a bootstrap token Secret (kube-system,
#      bootstrap-token-<id>, extra group system:bootstrappers:kubeadm:default-node-token; the
#      token is kept in $CLUSTER_DIR/bootstrap-token), the API server's
#      --enable-bootstrap-token-auth, and kubeadm's ClusterRoleBindings: bootstrappers may
#      create CSRs (system:node-bootstrapper) and have them auto-approved (...:nodeclient),
#      nodes have their renewals auto-approved (...:selfnodeclient). The controller-manager's
#      csrapproving and csrsigning controllers approve and sign them with the cluster CA;
#   6. the env file /run/crilet-dev/cluster/env (CRILET_CLUSTER_KUBECONFIG, CRILET_CLUSTER_SERVER,
#      CRILET_KUBECTL, CRILET_CLUSTER_CA, CRILET_CLUSTER_DIR, CRILET_CLUSTER_VERSION, ...).
# A component that is not running (or runs with other flags than this script would give it, or
# stopped answering) is (re)started; the others are left alone. Nothing listens or dials
# anywhere but 127.0.0.1. Only processes recorded in our pid files (or running our private
# binaries) are ever signalled.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

K8S_DEFAULT_CMDS=(kube-apiserver kube-controller-manager kube-scheduler)
CLUSTER_LOCK="$CRILET_RUN/cluster.lock"

PKI="$CLUSTER_PKI"
CA_CRT="$PKI/ca.crt"
CA_KEY="$PKI/ca.key"
SA_KEY="$PKI/sa.key"
SA_PUB="$PKI/sa.pub"
# The front proxy (API aggregation): a CA of its own, as kubeadm makes it, so that no client
# certificate of the cluster CA can pose as the aggregator; the API server's client certificate
# for proxying to aggregated API servers (metrics-server) is signed by it.
FRONT_PROXY_CA_CRT="$PKI/front-proxy-ca.crt"
FRONT_PROXY_CA_KEY="$PKI/front-proxy-ca.key"
FRONT_PROXY_CLIENT=front-proxy-client
SERVICE_CIDR=10.0.0.0/24
CLUSTER_NAME=crilet-dev
CLUSTER_SIGNING_DURATION="${CRILET_CLUSTER_SIGNING_DURATION:-3m}"
BOOTSTRAP_TOKEN_FILE="$CLUSTER_DIR/bootstrap-token"
BOOTSTRAP_GROUP=system:bootstrappers:kubeadm:default-node-token
KUBECTL_CACHE="$CLUSTER_DIR/kubectl-cache"
# Seconds each component gets to answer its health endpoint after a start.
START_DEADLINE=90
METRICS_SERVER_RESOLUTION=10s
# Which node address metrics-server dials. InternalIP: crilet nodes run with --node-ip 127.0.0.1.
# The upstream kubelet refuses a loopback node IP (its InternalIP is this host's primary IP,
# never to be dialled); run as node `localhost` it is reached by its Hostname instead
# (hack/top-peer.sh sets Hostname for the kubelet's turn; `metrics-server` restarts it when this
# changes).
METRICS_SERVER_ADDRESS_TYPES="${CRILET_METRICS_SERVER_ADDRESS_TYPES:-InternalIP}"
METRICS_APISERVICE=v1beta1.metrics.k8s.io

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }

# ------------------------------------------------------------------------------------------
# etcd and kubectl from Debian sid
# ------------------------------------------------------------------------------------------
# etcd_ok — $ETCD_BIN runs and is etcd $ETCD_VERSION.
etcd_ok() {
    [ -x "$ETCD_BIN" ] && grep -qx "etcd Version: $ETCD_VERSION" <<<"$("$ETCD_BIN" --version 2>/dev/null)"
}

# ensure_etcd — etcd-server at upstream version $ETCD_VERSION (the highest Debian revision of
# it that sid offers).
ensure_etcd() {
    local dest="$K8S_SID_DIR/etcd-server-$ETCD_VERSION" best
    etcd_ok && return 0
    sid_find best etcd-server "$ETCD_VERSION-*"
    [ -n "$best" ] || die "Debian sid does not offer etcd-server $ETCD_VERSION (has: $(sid_versions etcd-server | tr '\n' ' '))"
    log "fetching etcd-server $best from Debian sid into $dest"
    sid_unpack etcd-server "$best" "$dest"
    etcd_ok || die "$ETCD_BIN does not run or is not etcd $ETCD_VERSION"
}

ensure_kubectl() {
    local dest="$K8S_SID_DIR/kubectl-$KUBECTL_DEB_VERSION" found
    if [ -x "$KUBECTL_BIN" ] && "$KUBECTL_BIN" version --client >/dev/null 2>&1; then
        return 0
    fi
    # The exact version: a plain `download kubectl` could pick another kubectl package (the
    # image may carry one with a higher epoch).
    sid_find found kubectl "$KUBECTL_DEB_VERSION"
    [ -n "$found" ] ||
        die "Debian sid does not offer kubectl=$KUBECTL_DEB_VERSION (has: $(sid_versions kubectl | tr '\n' ' '))"
    log "fetching kubectl $KUBECTL_DEB_VERSION from Debian sid into $dest"
    sid_unpack kubectl "$KUBECTL_DEB_VERSION" "$dest"
    "$KUBECTL_BIN" version --client >/dev/null 2>&1 || die "$KUBECTL_BIN does not run"
}

# ------------------------------------------------------------------------------------------
# PKI (openssl). Keys are ECDSA P-256 in PKCS#8 PEM ("BEGIN PRIVATE KEY"), mode 0600; every
# certificate is kept while it verifies against the CA, matches its key and its recorded
# spec (subject, usage, SANs) and has more than a week left; otherwise it is issued anew.
# ------------------------------------------------------------------------------------------
PKI_CHANGED=0

# new_key FILE [rsa] — a fresh private key (EC P-256, or RSA 2048).
new_key() {
    local f="$1"
    rm -f "$f.tmp"
    if [ "${2:-ec}" = rsa ]; then
        (umask 077 && openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$f.tmp" 2>/dev/null)
    else
        (umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$f.tmp" 2>/dev/null)
    fi || die "openssl could not generate $f"
    mv -f "$f.tmp" "$f"
}

# key_matches CRT KEY — the certificate carries KEY's public key.
key_matches() {
    [ "$(openssl x509 -in "$1" -noout -pubkey 2>/dev/null)" = "$(openssl pkey -in "$2" -pubout 2>/dev/null)" ] &&
        [ -n "$(openssl pkey -in "$2" -pubout 2>/dev/null)" ]
}

# openssl_config USAGE SANS — a minimal config (not the system's openssl.cnf, whose defaults
# would add or duplicate extensions) with the extension section `ext`.
openssl_config() {
    local usage="$1" sans="$2"
    echo "[req]"
    echo "distinguished_name = dn"
    echo "[dn]"
    echo "[ext]"
    if [ "$usage" = ca ]; then
        echo "basicConstraints = critical, CA:TRUE"
        echo "keyUsage = critical, keyCertSign, cRLSign, digitalSignature"
        echo "subjectKeyIdentifier = hash"
    else
        echo "basicConstraints = critical, CA:FALSE"
        echo "keyUsage = critical, digitalSignature"
        echo "extendedKeyUsage = $usage"
        echo "subjectKeyIdentifier = hash"
        echo "authorityKeyIdentifier = keyid"
        [ -z "$sans" ] || echo "subjectAltName = $sans"
    fi
}

# ensure_ca [CRT KEY CN] — the cluster CA (default), or another CA (the front proxy's). Only a
# new cluster CA sets PKI_CHANGED (everything trusts it); the API server reloads the front
# proxy's CA and client certificate from their files when they change.
ensure_ca() {
    local crt="${1:-$CA_CRT}" key="${2:-$CA_KEY}" cn="${3:-crilet-dev-ca}" spec cfg
    spec="/CN=$cn|$(openssl_config ca "" | sha256sum | cut -d' ' -f1)"
    if [ -s "$crt" ] && [ -s "$key" ] && [ "$(cat "$crt.spec" 2>/dev/null)" = "$spec" ] &&
        openssl x509 -in "$crt" -noout -checkend 2592000 >/dev/null 2>&1 && key_matches "$crt" "$key"; then
        return 0
    fi
    log "creating the CA $cn in $PKI"
    mkdir -p "$PKI"
    chmod 0700 "$PKI"
    new_key "$key"
    cfg="$(mktemp)"
    openssl_config ca "" >"$cfg"
    openssl req -x509 -new -key "$key" -subj "/CN=$cn" -days 3650 -sha256 \
        -set_serial "0x$(openssl rand -hex 16)" -config "$cfg" -extensions ext -out "$crt.tmp" 2>/dev/null ||
        { rm -f "$cfg"; die "openssl could not create the CA $cn"; }
    rm -f "$cfg"
    mv -f "$crt.tmp" "$crt"
    echo "$spec" >"$crt.spec"
    [ "$crt" != "$CA_CRT" ] || PKI_CHANGED=1
}

# issue_cert BASE SUBJECT USAGE [SANS] — BASE.crt/BASE.key signed by the CA; USAGE is
# serverAuth or clientAuth.
issue_cert() {
    local base="$1" subj="$2" usage="$3" sans="${4:-}" spec cfg
    # What the certificate was made from: a change of the recipe issues it anew.
    spec="$subj|$(openssl_config "$usage" "$sans" | sha256sum | cut -d' ' -f1)"
    if [ -s "$base.crt" ] && [ -s "$base.key" ] && [ "$(cat "$base.crt.spec" 2>/dev/null)" = "$spec" ] &&
        openssl verify -CAfile "$CA_CRT" "$base.crt" >/dev/null 2>&1 &&
        openssl x509 -in "$base.crt" -noout -checkend 604800 >/dev/null 2>&1 && key_matches "$base.crt" "$base.key"; then
        return 0
    fi
    mkdir -p "$(dirname "$base")"
    new_key "$base.key"
    cfg="$(mktemp)"
    openssl_config "$usage" "$sans" >"$cfg"
    if ! openssl req -new -key "$base.key" -subj "$subj" -config "$cfg" 2>/dev/null |
        openssl x509 -req -CA "$CA_CRT" -CAkey "$CA_KEY" -set_serial "0x$(openssl rand -hex 16)" -days 365 -sha256 \
            -extfile "$cfg" -extensions ext -out "$base.crt.tmp" 2>/dev/null; then
        rm -f "$cfg"
        die "openssl could not issue $base.crt ($subj)"
    fi
    rm -f "$cfg"
    mv -f "$base.crt.tmp" "$base.crt"
    echo "$spec" >"$base.crt.spec"
    log "issued $base.crt ($subj${sans:+; $sans})"
}

ensure_sa_keys() {
    if [ -s "$SA_KEY" ] && [ -s "$SA_PUB" ] && [ "$(openssl pkey -in "$SA_KEY" -pubout 2>/dev/null)" = "$(cat "$SA_PUB")" ]; then
        return 0
    fi
    new_key "$SA_KEY" rsa
    openssl pkey -in "$SA_KEY" -pubout -out "$SA_PUB" 2>/dev/null || die "openssl could not write $SA_PUB"
    log "created the service-account signing key pair ($SA_KEY, $SA_PUB)"
    PKI_CHANGED=1
}

# kubeconfig_text USER CREDENTIALS — a kubeconfig for this cluster (CA embedded) whose user
# USER has CREDENTIALS (the `user:` lines, indented by four spaces).
kubeconfig_text() {
    cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: $CLUSTER_SERVER
    certificate-authority-data: $(base64 -w0 <"$CA_CRT")
users:
- name: $1
  user:
$2
contexts:
- name: $CLUSTER_NAME
  context:
    cluster: $CLUSTER_NAME
    user: $1
current-context: $CLUSTER_NAME
EOF
}

# write_kubeconfig FILE USER CERT KEY — everything embedded (base64 data), no paths; mode 0600.
write_kubeconfig() {
    local file="$1" user="$2" crt="$3" key="$4" content
    content="$(kubeconfig_text "$user" "    client-certificate-data: $(base64 -w0 <"$crt")
    client-key-data: $(base64 -w0 <"$key")")"
    [ -f "$file" ] && [ "$(cat "$file")" = "$content" ] && return 0
    mkdir -p "$(dirname "$file")"
    (umask 077 && printf '%s\n' "$content" >"$file.tmp")
    mv -f "$file.tmp" "$file"
}

ensure_pki() {
    command -v openssl >/dev/null || die "openssl is not installed"
    mkdir -p "$CLUSTER_DIR"
    ensure_ca
    ensure_sa_keys
    # $GUEST_HOST_LOOPBACK: how hack/guest.sh's guest reaches this API server (slirp's guestfwd
    # to 127.0.0.1), so a node in the guest verifies the server as any node does.
    issue_cert "$PKI/apiserver" "/CN=kube-apiserver" serverAuth \
        "IP:127.0.0.1, IP:10.0.0.1, IP:$GUEST_HOST_LOOPBACK, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc"
    issue_cert "$PKI/admin" "/O=system:masters/CN=admin" clientAuth
    issue_cert "$PKI/apiserver-kubelet-client" "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    ensure_front_proxy_pki
    # metrics-server's serving certificate: the aggregator dials https://localhost:PORT (an
    # ExternalName Service, see cmd_metrics_server) and verifies it as the Service's DNS name
    # against the APIService's caBundle (the cluster CA).
    issue_cert "$PKI/metrics-server" "/CN=metrics-server" serverAuth \
        "DNS:metrics-server.kube-system.svc, DNS:localhost, IP:127.0.0.1"
    write_kubeconfig "$CLUSTER_ADMIN_KUBECONFIG" admin "$PKI/admin.crt" "$PKI/admin.key"
    ensure_audit_policy
}

# ensure_front_proxy_pki — the front proxy's CA and the API server's proxy client certificate
# (CN=$FRONT_PROXY_CLIENT, the one name --requestheader-allowed-names lets through).
ensure_front_proxy_pki() {
    ensure_ca "$FRONT_PROXY_CA_CRT" "$FRONT_PROXY_CA_KEY" crilet-dev-front-proxy-ca
    # issue_cert signs with CA_CRT/CA_KEY: here the front proxy's (dynamic scope).
    local CA_CRT="$FRONT_PROXY_CA_CRT" CA_KEY="$FRONT_PROXY_CA_KEY"
    issue_cert "$PKI/front-proxy-client" "/CN=$FRONT_PROXY_CLIENT" clientAuth
}

# The API server audits what node identities (group system:nodes) ask, at Metadata level and
# nothing else: the benchmark counts a node agent's requests from it (hack/bench-cluster.sh), and
# it shows which objects a node reads (the Node authorizer lets it read only its own pods' own).
ensure_audit_policy() {
    write_file "$CLUSTER_AUDIT_POLICY" <<EOF || true
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:nodes"]
- level: None
EOF
}

# ------------------------------------------------------------------------------------------
# Components
# ------------------------------------------------------------------------------------------
# component_bin NAME — its binary (also the marker that tells our process from anyone's).
component_bin() {
    case "$1" in
        etcd) echo "$ETCD_BIN" ;;
        metrics-server) echo "$METRICS_SERVER_BIN" ;;
        *) echo "$K8S_BIN_DIR/$1" ;;
    esac
}
component_pidfile() { echo "$CLUSTER_RUN/$1.pid"; }
component_log() { echo "$LOG_DIR/cluster-$1.log"; }
component_ports() {
    case "$1" in
        etcd) echo "$CLUSTER_ETCD_CLIENT_PORT $CLUSTER_ETCD_PEER_PORT" ;;
        kube-apiserver) echo "$CLUSTER_APISERVER_PORT" ;;
        kube-controller-manager) echo "$CLUSTER_KCM_PORT" ;;
        kube-scheduler) echo "$CLUSTER_SCHEDULER_PORT" ;;
        metrics-server) echo "$CLUSTER_METRICS_SERVER_PORT" ;;
    esac
}

# component_argv NAME — set ARGV to the full command line of NAME.
# kube-apiserver: --advertise-address 127.0.0.1 is accepted, but the endpoint reconciler then
# fails every 10 s (Endpoints "kubernetes": "may not be in the loopback range"); with
# --endpoint-reconciler-type none the `kubernetes` Service simply has no endpoints (nothing
# could route to its ClusterIP anyway: there is no kube-proxy), and nothing ever advertises
# this host's primary IP. The front proxy (--requestheader-*, --proxy-client-*) is what API
# aggregation needs (metrics.k8s.io from metrics-server): the API server publishes its CA and
# header names in kube-system/extension-apiserver-authentication, where aggregated servers and
# the controller-manager and scheduler (--authentication/--authorization-kubeconfig) read them
# to trust requests the API server forwards. --enable-aggregator-routing stays off: the
# aggregator then dials an APIService's Service by its ClusterIP, or its externalName for an
# ExternalName Service (localhost for metrics-server, on this machine).
component_argv() {
    local bin
    bin="$(component_bin "$1")"
    case "$1" in
        etcd)
            ARGV=("$bin" --name default --data-dir "$CLUSTER_ETCD_DATA"
                --listen-client-urls "http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT"
                --advertise-client-urls "http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT"
                --listen-peer-urls "http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT"
                --initial-advertise-peer-urls "http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT"
                --initial-cluster "default=http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT"
                --initial-cluster-state new --unsafe-no-fsync=true --log-level warn) ;;
        kube-apiserver)
            # shellcheck disable=SC2054  # the commas are inside flag values
            ARGV=("$bin" --etcd-servers "http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT"
                --bind-address 127.0.0.1 --advertise-address 127.0.0.1
                --endpoint-reconciler-type none
                --secure-port "$CLUSTER_APISERVER_PORT"
                --cert-dir "$CLUSTER_DIR/apiserver-certs"
                --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key"
                --client-ca-file "$CA_CRT"
                --requestheader-client-ca-file "$FRONT_PROXY_CA_CRT"
                --requestheader-allowed-names "$FRONT_PROXY_CLIENT"
                --requestheader-username-headers X-Remote-User
                --requestheader-group-headers X-Remote-Group
                --requestheader-extra-headers-prefix X-Remote-Extra-
                --proxy-client-cert-file "$PKI/front-proxy-client.crt"
                --proxy-client-key-file "$PKI/front-proxy-client.key"
                --enable-bootstrap-token-auth
                --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt"
                --kubelet-client-key "$PKI/apiserver-kubelet-client.key"
                --kubelet-preferred-address-types InternalIP
                --service-cluster-ip-range "$SERVICE_CIDR"
                --allow-privileged=true
                --authorization-mode Node,RBAC
                --enable-admission-plugins NodeRestriction
                --service-account-issuer https://kubernetes.default.svc
                --service-account-key-file "$SA_PUB"
                --service-account-signing-key-file "$SA_KEY"
                --feature-gates ContainerStopSignals=true
                --audit-policy-file "$CLUSTER_AUDIT_POLICY" --audit-log-path "$CLUSTER_AUDIT_LOG"
                --audit-log-maxsize 100 --audit-log-maxbackup 1
                --profiling="$([ "${CRILET_CLUSTER_PROFILING:-0}" = 1 ] && echo true || echo false)") ;;
        kube-controller-manager)
            ARGV=("$bin" --kubeconfig "$CLUSTER_ADMIN_KUBECONFIG"
                --bind-address 127.0.0.1 --secure-port "$CLUSTER_KCM_PORT"
                --leader-elect=false
                --controllers '*,bootstrapsigner,tokencleaner,-nodeipam,-service-lb-controller,-cloud-node-lifecycle'
                --service-account-private-key-file "$SA_KEY"
                --root-ca-file "$CA_CRT"
                --cluster-signing-cert-file "$CA_CRT" --cluster-signing-key-file "$CA_KEY"
                --cluster-signing-duration "$CLUSTER_SIGNING_DURATION"
                --authentication-kubeconfig "$CLUSTER_ADMIN_KUBECONFIG"
                --authorization-kubeconfig "$CLUSTER_ADMIN_KUBECONFIG"
                --use-service-account-credentials=false
                --profiling=false) ;;
        kube-scheduler)
            ARGV=("$bin" --kubeconfig "$CLUSTER_ADMIN_KUBECONFIG"
                --bind-address 127.0.0.1 --secure-port "$CLUSTER_SCHEDULER_PORT"
                --authentication-kubeconfig "$CLUSTER_ADMIN_KUBECONFIG"
                --authorization-kubeconfig "$CLUSTER_ADMIN_KUBECONFIG"
                --leader-elect=false
                --profiling=false) ;;
        metrics-server)
            # The admin kubeconfig for the API server, for delegated authn/authz (the front
            # proxy's CA from extension-apiserver-authentication) and for the kubelets (admin is
            # in system:masters, which every kubelet API authorizes). Kubelets at their
            # InternalIP (crilet nodes: --node-ip 127.0.0.1) and the port their NodeStatus
            # gives, verified against the cluster CA, which signs the serving certificates
            # `cluster.sh node` makes. --kubelet-request-timeout under 90 % of the resolution
            # (metrics-server refuses the 10 s default with a 10 s resolution).
            ARGV=("$bin" --kubeconfig "$CLUSTER_ADMIN_KUBECONFIG"
                --authentication-kubeconfig "$CLUSTER_ADMIN_KUBECONFIG"
                --authorization-kubeconfig "$CLUSTER_ADMIN_KUBECONFIG"
                --bind-address 127.0.0.1 --secure-port "$CLUSTER_METRICS_SERVER_PORT"
                --cert-dir "$CLUSTER_DIR/metrics-server-certs"
                --tls-cert-file "$PKI/metrics-server.crt" --tls-private-key-file "$PKI/metrics-server.key"
                --kubelet-preferred-address-types "$METRICS_SERVER_ADDRESS_TYPES"
                --kubelet-use-node-status-port
                --kubelet-certificate-authority "$CA_CRT"
                --kubelet-request-timeout 5s
                --metric-resolution "$METRICS_SERVER_RESOLUTION"
                --profiling=false) ;;
        *) die "unknown component $1" ;;
    esac
}

# curl to loopback only, never through a proxy.
lcurl() { curl -fsS --noproxy '*' --max-time 3 "$@"; }

# component_healthy NAME — its health endpoint answers ok.
component_healthy() {
    case "$1" in
        etcd) grep -q '"health":"true"' <<<"$(lcurl "http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT/health" 2>/dev/null)" ;;
        kube-apiserver)
            [ "$(lcurl --cacert "$CA_CRT" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
                "$CLUSTER_SERVER/readyz" 2>/dev/null)" = ok ] ;;
        # Self-signed serving certificates (made in memory): -k, on 127.0.0.1.
        kube-controller-manager) [ "$(lcurl -k "https://127.0.0.1:$CLUSTER_KCM_PORT/healthz" 2>/dev/null)" = ok ] ;;
        kube-scheduler) [ "$(lcurl -k "https://127.0.0.1:$CLUSTER_SCHEDULER_PORT/healthz" 2>/dev/null)" = ok ] ;;
        # /livez, not /readyz: it is ready only once it has scraped a node twice.
        metrics-server)
            [ "$(lcurl --cacert "$CA_CRT" "https://127.0.0.1:$CLUSTER_METRICS_SERVER_PORT/livez" 2>/dev/null)" = ok ] ;;
    esac
}

# component_pid NAME — the PID of our running NAME (re-adopted if its pid file was lost).
component_pid() {
    local bin pidfile
    bin="$(component_bin "$1")"
    pidfile="$(component_pidfile "$1")"
    adopt "$pidfile" "$(basename "$bin")" "$bin" >/dev/null 2>&1 || true
    live_pid "$pidfile" "$bin"
}

# stop_component NAME — SIGTERM, SIGKILL after a grace period. kube-apiserver normally exits
# within 2 s, but now and then hangs after "Stopped listening" until killed: its grace is
# short (its state is thrown away by `down` anyway).
stop_component() {
    local bin grace=20
    bin="$(component_bin "$1")"
    [ "$1" = kube-apiserver ] && grace=10
    component_pid "$1" >/dev/null || true
    stop_pid "$(component_pidfile "$1")" "$bin" "$1" "$grace"
}

# listener_on PORT — something listens on 127.0.0.1:PORT (or on every address).
listener_on() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

# ensure_component NAME — running with our flags and healthy; started (or restarted) otherwise.
ensure_component() {
    local name="$1" pid want log port t0
    component_argv "$name"
    want="$(printf '%s ' "${ARGV[@]}")"
    log="$(component_log "$name")"
    if pid="$(component_pid "$name")"; then
        if [ "$(pid_cmdline "$pid")" != "$want" ]; then
            log "$name (pid $pid) runs with other flags than this script gives it; restarting it"
            stop_component "$name"
        elif [ "$PKI_CHANGED" = 1 ]; then
            log "the CA or service-account keys changed; restarting $name (pid $pid)"
            stop_component "$name"
        elif wait_for 30 "$name (pid $pid) to answer" component_healthy "$name"; then
            log "$name already running (pid $pid)"
            return 0
        else
            warn "$name (pid $pid) runs but does not answer; restarting it"
            stop_component "$name"
        fi
    fi
    for port in $(component_ports "$name"); do
        listener_on "$port" && die "port $port (for $name) is taken by a process that is not ours: $(ss -Hltnp "sport = :$port" | head -n1)"
    done
    [ -x "${ARGV[0]}" ] || die "${ARGV[0]} is missing (hack/cluster.sh build)"
    t0=$SECONDS
    mkdir -p "$CLUSTER_RUN" "$LOG_DIR"
    printf '\n[%s] starting %s\n' "$(date '+%F %T')" "$name" >>"$log"
    # 9>&-: the daemon must not inherit our lock.
    start_daemon "$(component_pidfile "$name")" "$log" "${ARGV[@]}" 9>&-
    pid="$(cat "$(component_pidfile "$name")")"
    if ! wait_for "$START_DEADLINE" "$name to answer" component_healthy "$name"; then
        tail -n 20 "$log" >&2 || true
        if [ -d "/proc/$pid" ]; then
            die "$name (pid $pid) did not become healthy within ${START_DEADLINE}s; see $log"
        fi
        die "$name exited; see $log"
    fi
    log "$name started (pid $pid, healthy after $((SECONDS - t0))s; log $log)"
}

kc() { "$KUBECTL_BIN" --kubeconfig "$CLUSTER_ADMIN_KUBECONFIG" --cache-dir "$KUBECTL_CACHE" "$@"; }

write_cluster_env() {
    mkdir -p "$CLUSTER_RUN"
    # Plain KEY=VALUE lines without quotes or comments (like setup.sh's env file).
    write_file "$CLUSTER_ENV_FILE" <<EOF || true
CRILET_CLUSTER_KUBECONFIG=$CLUSTER_ADMIN_KUBECONFIG
CRILET_CLUSTER_SERVER=$CLUSTER_SERVER
CRILET_KUBECTL=$KUBECTL_BIN
CRILET_KUBECTL_CACHE_DIR=$KUBECTL_CACHE
CRILET_CLUSTER_CA=$CA_CRT
CRILET_CLUSTER_DIR=$CLUSTER_DIR
CRILET_CLUSTER_NODES_DIR=$CLUSTER_NODES_DIR
CRILET_CLUSTER_VERSION=$K8S_VERSION
CRILET_CLUSTER_BIN_DIR=$K8S_BIN_DIR
CRILET_CLUSTER_SERVICE_CIDR=$SERVICE_CIDR
CRILET_CLUSTER_ETCD_ENDPOINT=http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT
CRILET_CLUSTER_AUDIT_LOG=$CLUSTER_AUDIT_LOG
CRILET_CLUSTER_SIGNING_DURATION=$CLUSTER_SIGNING_DURATION
EOF
}

# ensure_bootstrap_token — the cluster's bootstrap token (id.secret, kubeadm's format), made
# once and kept in $BOOTSTRAP_TOKEN_FILE; its Secret and kubeadm's RBAC for bootstrappers
# applied (idempotent: etcd may have been wiped since).
ensure_bootstrap_token() {
    local id secret
    if ! grep -Eqx '[a-z0-9]{6}\.[a-z0-9]{16}' "$BOOTSTRAP_TOKEN_FILE" 2>/dev/null; then
        mkdir -p "$CLUSTER_DIR"
        id="$(tr -dc 'a-z0-9' </dev/urandom | head -c 6 || true)"
        secret="$(tr -dc 'a-z0-9' </dev/urandom | head -c 16 || true)"
        (umask 077 && echo "$id.$secret" >"$BOOTSTRAP_TOKEN_FILE")
        log "created the bootstrap token $id (kept in $BOOTSTRAP_TOKEN_FILE)"
    fi
    id="$(cut -d. -f1 "$BOOTSTRAP_TOKEN_FILE")"
    secret="$(cut -d. -f2 "$BOOTSTRAP_TOKEN_FILE")"
    {
        cat <<EOF

apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-$id
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: "crilet-dev nodes join with this token (hack/cluster.sh bootstrap-kubeconfig)"
  token-id: "$id"
  token-secret: "$secret"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: "$BOOTSTRAP_GROUP"
EOF
        # kubeadm's bindings: bootstrappers may ask for a client certificate and have it
        # auto-approved; nodes have their renewals auto-approved.
        group_binding kubeadm:kubelet-bootstrap system:node-bootstrapper "$BOOTSTRAP_GROUP"
        group_binding kubeadm:node-autoapprove-bootstrap \
            system:certificates.k8s.io:certificatesigningrequests:nodeclient "$BOOTSTRAP_GROUP"
        group_binding kubeadm:node-autoapprove-certificate-rotation \
            system:certificates.k8s.io:certificatesigningrequests:selfnodeclient system:nodes
    } | kc apply --server-side --force-conflicts --field-manager crilet-dev -f - >/dev/null ||
        die "could not apply the bootstrap token and its RBAC"
}

# group_binding NAME CLUSTERROLE GROUP — a ClusterRoleBinding document (after a `---`).
group_binding() {
    cat <<EOF
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: $1
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: $2
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: $3
EOF
}

# write_file PATH — stdin into PATH if it differs (status 1 when unchanged).
write_file() {
    local path="$1" content
    content="$(cat)"
    if [ -f "$path" ] && [ "$(cat "$path")" = "$content" ]; then return 1; fi
    mkdir -p "$(dirname "$path")"
    printf '%s\n' "$content" >"$path.tmp"
    mv -f "$path.tmp" "$path"
}

# ------------------------------------------------------------------------------------------
# Subcommands
# ------------------------------------------------------------------------------------------
lock() {
    mkdir -p "$CRILET_RUN"
    exec 9>"$CLUSTER_LOCK"
    flock -w 1200 9 || die "another hack/cluster.sh holds $CLUSTER_LOCK"
}

cmd_build() {
    local cmds=("${K8S_DEFAULT_CMDS[@]}")
    [ "${1:-}" = kubelet ] && cmds+=(kubelet)
    build_k8s "${cmds[@]}"
    # Built with the cluster (cached), started on demand (cmd_metrics_server).
    build_metrics_server
    ensure_etcd
    ensure_kubectl
}

cmd_up() {
    local t0=$SECONDS name
    cmd_build
    ensure_pki
    if [ "$PKI_CHANGED" = 1 ]; then
        # Every running component would keep the old CA/keys in memory; data signed or
        # trusted with the old ones is worthless too.
        for name in metrics-server kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_component "$name"; done
        rm -rf "$CLUSTER_ETCD_DATA"
        PKI_CHANGED=0
    fi
    mkdir -p "$CLUSTER_ETCD_DATA"
    chmod 0700 "$CLUSTER_ETCD_DATA"
    for name in "${CLUSTER_COMPONENTS[@]}"; do ensure_component "$name"; done
    wait_for "$START_DEADLINE" "the default ServiceAccount in namespace default" kc -n default get serviceaccount default ||
        die "no default ServiceAccount after ${START_DEADLINE}s; see $(component_log kube-controller-manager)"
    wait_for "$START_DEADLINE" "ConfigMap kube-root-ca.crt in namespace default" kc -n default get configmap kube-root-ca.crt ||
        die "no kube-root-ca.crt ConfigMap after ${START_DEADLINE}s; see $(component_log kube-controller-manager)"
    ensure_bootstrap_token
    drop_stale_apiservice
    write_cluster_env
    local pids=""
    for name in "${CLUSTER_COMPONENTS[@]}"; do pids+="${pids:+, }$name $(component_pid "$name")"; done
    echo "cluster ready in $((SECONDS - t0))s: Kubernetes $K8S_VERSION at $CLUSTER_SERVER" \
        "(pids: $pids), admin kubeconfig $CLUSTER_ADMIN_KUBECONFIG, env in $CLUSTER_ENV_FILE"
}

cmd_down() {
    local purge=0 name
    case "${1:-}" in
        "") ;;
        --purge) purge=1 ;;
        *) usage ;;
    esac
    for name in metrics-server kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_component "$name"; done
    rm -rf "$CLUSTER_RUN" "$CLUSTER_ETCD_DATA" "$KUBECTL_CACHE" "$CLUSTER_DIR/apiserver-certs" "$CLUSTER_DIR/metrics-server-certs"
    if [ "$purge" = 1 ]; then
        rm -rf "$CLUSTER_DIR"
        log "cluster stopped; its state ($CLUSTER_DIR) removed (binaries and build caches in $K8S_DIR kept)"
    else
        log "cluster stopped; etcd data removed (PKI and kubeconfigs in $CLUSTER_DIR kept)"
    fi
}

cmd_node() {
    local name="${1:-}" dir sans
    [ -n "$name" ] || usage
    [[ "$name" =~ ^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$ ]] || die "invalid node name '$name' (lowercase DNS-1123 subdomain)"
    ensure_pki
    if [ "$PKI_CHANGED" = 1 ] && component_pid kube-apiserver >/dev/null; then
        warn "a new CA was made while the cluster runs with the old one: run hack/cluster.sh to restart it"
    fi
    dir="$CLUSTER_NODES_DIR/$name"
    mkdir -p "$dir"
    issue_cert "$dir/client" "/O=system:nodes/CN=system:node:$name" clientAuth
    sans="IP:127.0.0.1, DNS:$name"
    [ "$name" = localhost ] || sans+=", DNS:localhost"
    issue_cert "$dir/kubelet" "/CN=$name" serverAuth "$sans"
    write_kubeconfig "$dir/kubeconfig" "system:node:$name" "$dir/client.crt" "$dir/client.key"
    write_file "$dir/env" <<EOF || true
CRILET_NODE_NAME=$name
CRILET_NODE_KUBECONFIG=$dir/kubeconfig
CRILET_NODE_CLIENT_CERT=$dir/client.crt
CRILET_NODE_CLIENT_KEY=$dir/client.key
CRILET_NODE_TLS_CERT=$dir/kubelet.crt
CRILET_NODE_TLS_KEY=$dir/kubelet.key
CRILET_CLUSTER_CA=$CA_CRT
CRILET_CLUSTER_SERVER=$CLUSTER_SERVER
EOF
    cat "$dir/env"
}

# cmd_bootstrap_kubeconfig NAME — node NAME's bootstrap kubeconfig (the cluster's token, server
# and CA), as `kubeadm join` writes /etc/kubernetes/bootstrap-kubelet.conf; prints its env.
cmd_bootstrap_kubeconfig() {
    local name="${1:-}" dir
    [ -n "$name" ] || usage
    [[ "$name" =~ ^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$ ]] || die "invalid node name '$name' (lowercase DNS-1123 subdomain)"
    ensure_bootstrap_token
    dir="$CLUSTER_NODES_DIR/$name"
    mkdir -p "$dir"
    (umask 077 && write_file "$dir/bootstrap-kubeconfig" <<<"$(kubeconfig_text tls-bootstrap-token-user \
        "    token: $(cat "$BOOTSTRAP_TOKEN_FILE")")") || true
    chmod 0600 "$dir/bootstrap-kubeconfig"
    write_file "$dir/bootstrap-env" <<EOF || true
CRILET_NODE_NAME=$name
CRILET_NODE_BOOTSTRAP_KUBECONFIG=$dir/bootstrap-kubeconfig
CRILET_CLUSTER_CA=$CA_CRT
CRILET_CLUSTER_SERVER=$CLUSTER_SERVER
CRILET_CLUSTER_SIGNING_DURATION=$CLUSTER_SIGNING_DURATION
EOF
    cat "$dir/bootstrap-env"
}

# cmd_kubeadm — what `kubeadm init` leaves for `kubeadm join` on a cluster it did not make,
# made by kubeadm's own phases (kubeadm built from the same module): the kubeadm-config
# (ClusterConfiguration) and kubelet-config (the KubeletConfiguration every joining node gets)
# ConfigMaps with their RBAC, the bootstrap token (ours, never expiring) with its RBAC, and the
# cluster-info ConfigMap in kube-public that discovery reads (server and CA from the admin
# kubeconfig: https://127.0.0.1:16443), signed per token by the controller-manager's
# bootstrapsigner. Prints KUBEADM_*= lines: the binary, the endpoint, token and CA hash.
cmd_kubeadm() {
    local cfg token hash phase id i
    build_k8s kubeadm
    ensure_bootstrap_token
    token="$(cat "$BOOTSTRAP_TOKEN_FILE")"
    cfg="$CLUSTER_DIR/kubeadm.yaml"
    (umask 077 && write_file "$cfg" <<EOF) || true
# Written by hack/cluster.sh kubeadm: the cluster as kubeadm would have made it.
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: "$token"
  description: "crilet-dev nodes join with this token (hack/cluster.sh)"
  ttl: 0s
  usages: [signing, authentication]
  groups: [$BOOTSTRAP_GROUP]
# Where nodes reach this API server from hack/guest.sh's guest: kubeadm refuses a loopback
# address here, and with none it would look up this host's own (it only checks this one).
localAPIEndpoint:
  advertiseAddress: $GUEST_HOST_LOOPBACK
  bindPort: $CLUSTER_APISERVER_PORT
nodeRegistration:
  name: $CLUSTER_NAME-control-plane
  criSocket: unix:///run/containerd/containerd.sock
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: $CLUSTER_NAME
kubernetesVersion: $K8S_VERSION
controlPlaneEndpoint: 127.0.0.1:$CLUSTER_APISERVER_PORT
# kubeadm's place, not this cluster's PKI: it names the CA file every joining node's
# KubeletConfiguration reads (clientCAFile), which kubeadm join writes there.
certificatesDir: /etc/kubernetes/pki
networking:
  serviceSubnet: $SERVICE_CIDR
  dnsDomain: cluster.local
EOF
    for phase in "upload-config kubeadm" "upload-config kubelet" "bootstrap-token --skip-token-print"; do
        # shellcheck disable=SC2086
        quietly "$K8S_BIN_DIR/kubeadm" init phase $phase --config "$cfg" --kubeconfig "$CLUSTER_ADMIN_KUBECONFIG" ||
            die "kubeadm init phase $phase failed"
    done
    # The discovery pin: sha256 of the CA's SubjectPublicKeyInfo, as kubeadm prints it.
    hash="$(openssl x509 -in "$CA_CRT" -noout -pubkey | openssl pkey -pubin -outform der | sha256sum | cut -d' ' -f1)"
    # The bootstrapsigner signs cluster-info for the token within a moment.
    id="${token%%.*}"
    for i in $(seq 1 60); do
        kc -n kube-public get configmap cluster-info -o "jsonpath={.data.jws-kubeconfig-$id}" 2>/dev/null | grep -q . && break
        [ "$i" -lt 60 ] || die "cluster-info is not signed for token $id (is the controller-manager's bootstrapsigner running?)"
        sleep 1
    done
    cat <<EOF
KUBEADM_BIN=$K8S_BIN_DIR/kubeadm
KUBEADM_ENDPOINT=127.0.0.1:$CLUSTER_APISERVER_PORT
KUBEADM_TOKEN=$token
KUBEADM_CA_CERT_HASH=sha256:$hash
EOF
}

# ------------------------------------------------------------------------------------------
# metrics-server (on demand)
# ------------------------------------------------------------------------------------------
# Its Service is an ExternalName one (externalName: localhost, no ports): Endpoints may not hold
# a loopback address, but with --enable-aggregator-routing off the aggregator resolves an
# ExternalName Service to https://EXTERNALNAME:PORT, PORT the APIService's (apiserver's
# proxy.ResolveCluster), and verifies the server as metrics-server.kube-system.svc against
# caBundle.
metrics_apiservice_yaml() {
    cat <<EOF
apiVersion: v1
kind: Service
metadata:
  name: metrics-server
  namespace: kube-system
  labels:
    app.kubernetes.io/managed-by: crilet-dev
spec:
  type: ExternalName
  externalName: localhost
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: $METRICS_APISERVICE
  labels:
    app.kubernetes.io/managed-by: crilet-dev
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  service:
    name: metrics-server
    namespace: kube-system
    port: $CLUSTER_METRICS_SERVER_PORT
  caBundle: $(base64 -w0 <"$CA_CRT")
EOF
}

# drop_metrics_apiservice — an APIService nobody serves breaks discovery for every client and
# blocks namespace deletion (the namespace controller must list every group): it goes first.
drop_metrics_apiservice() {
    kc delete apiservice "$METRICS_APISERVICE" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    kc -n kube-system delete service metrics-server --ignore-not-found --wait=false >/dev/null 2>&1 || true
}

# drop_stale_apiservice — our APIService when metrics-server does not run (it died, or the
# machine rebooted): see drop_metrics_apiservice.
drop_stale_apiservice() {
    component_pid metrics-server >/dev/null && return 0
    kc get apiservice "$METRICS_APISERVICE" >/dev/null 2>&1 || return 0
    log "metrics-server does not run: removing the APIService $METRICS_APISERVICE it served"
    drop_metrics_apiservice
}

cmd_metrics_server() {
    case "${1:-}" in
        "") ;;
        stop)
            drop_metrics_apiservice
            stop_component metrics-server
            rm -rf "$CLUSTER_DIR/metrics-server-certs"
            return 0 ;;
        *) usage ;;
    esac
    component_healthy kube-apiserver || die "the control plane does not answer: run hack/cluster.sh first"
    build_metrics_server
    ensure_pki
    [ "$PKI_CHANGED" = 0 ] || die "the cluster CA changed: run hack/cluster.sh first"
    # Its self-signed fallback certificates would go here (it is given ours).
    mkdir -p "$CLUSTER_DIR/metrics-server-certs"
    ensure_component metrics-server
    metrics_apiservice_yaml | kc apply --server-side --force-conflicts --field-manager crilet-dev -f - >/dev/null ||
        die "could not apply the metrics-server Service and APIService"
    kc wait --for condition=Available --timeout "${START_DEADLINE}s" apiservice "$METRICS_APISERVICE" >/dev/null ||
        die "APIService $METRICS_APISERVICE is not Available: $(kc get apiservice "$METRICS_APISERVICE" \
            -o jsonpath='{.status.conditions[?(@.type=="Available")].message}' 2>&1); see $(component_log metrics-server)"
    cat <<EOF
METRICS_SERVER_PID=$(component_pid metrics-server)
METRICS_SERVER_URL=https://127.0.0.1:$CLUSTER_METRICS_SERVER_PORT
METRICS_SERVER_VERSION=$METRICS_SERVER_VERSION
METRICS_SERVER_RESOLUTION=$METRICS_SERVER_RESOLUTION
METRICS_SERVER_LOG=$(component_log metrics-server)
EOF
}

cmd_status() {
    local name pid bad=0 state
    for name in "${CLUSTER_COMPONENTS[@]}"; do
        if pid="$(component_pid "$name")"; then
            if component_healthy "$name"; then state="running (pid $pid), healthy"; else state="running (pid $pid), NOT answering"; bad=1; fi
        else
            state="not running"; bad=1
        fi
        printf '%-24s %-40s ports %s\n' "$name" "$state" "$(component_ports "$name")"
    done
    # On demand: not running is no failure.
    if pid="$(component_pid metrics-server)"; then
        if component_healthy metrics-server; then state="running (pid $pid), healthy"; else state="running (pid $pid), NOT answering"; bad=1; fi
    else
        state="not running (on demand: hack/cluster.sh metrics-server)"
    fi
    printf '%-24s %-40s ports %s\n' metrics-server "$state" "$(component_ports metrics-server)"
    if [ -f "$CLUSTER_ENV_FILE" ]; then echo "env file: $CLUSTER_ENV_FILE"; else echo "env file: none"; fi
    return "$bad"
}

main() {
    local cmd="${1:-up}"
    [ $# -eq 0 ] || shift
    case "$cmd" in
        -v | --verbose) CRILET_VERBOSE=1; main "$@"; return ;;
        -h | --help) usage 0 ;;
    esac
    require_root
    case "$cmd" in
        up) [ $# -eq 0 ] || usage; lock; cmd_up ;;
        down) [ $# -le 1 ] || usage; lock; cmd_down "$@" ;;
        node) [ $# -eq 1 ] || usage; lock; cmd_node "$1" ;;
        bootstrap-kubeconfig) [ $# -eq 1 ] || usage; lock; cmd_bootstrap_kubeconfig "$1" ;;
        kubeadm) [ $# -eq 0 ] || usage; lock; cmd_kubeadm ;;
        build)
            [ $# -eq 0 ] || { [ $# -eq 1 ] && [ "$1" = kubelet ]; } || usage
            lock; cmd_build "$@" ;;
        metrics-server) [ $# -le 1 ] || usage; lock; cmd_metrics_server "$@" ;;
        status) [ $# -eq 0 ] || usage; cmd_status ;;
        *) echo "unknown command: $cmd" >&2; usage ;;
    esac
}

main "$@"
