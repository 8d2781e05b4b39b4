//! `kubeadm join` as a node operator runs it, on a node as production runs them (`hack/guest.sh`'s
//! guest: systemd as PID 1, cgroup v2, containerd on the systemd cgroup driver as kubeadm wants
//! it): crilet from its Debian package, the package's kubeadm drop-in and the `kubelet.service`
//! name given to crilet.service (README, "Joining with kubeadm"), kubeadm v1.36.3 built from its
//! Go module, and `hack/cluster.sh`'s control plane made joinable by kubeadm's own init phases
//! (`hack/cluster.sh kubeadm`). kubeadm discovers the cluster with a token and the CA's hash,
//! writes the bootstrap kubeconfig, the KubeletConfiguration and kubeadm-flags.env, restarts
//! "kubelet" and waits for its /healthz and its TLS bootstrap; the Node goes Ready and a
//! Deployment's pod runs there with the cluster's DNS settings. Then `kubeadm reset`, as an
//! operator takes a node out.
//!
//! Two of kubeadm's preflight checks run `kubelet --version` and fail without a kubelet binary:
//! KubeletVersion, and SystemVerification, which needs the version before it runs its kernel,
//! cgroup and OS validators (so they do not run; `crilet preflight` checks the cgroups). The
//! join ignores those two, and no other.
//!
//! Ignored by a plain `cargo test`: it needs `hack/guest.sh up` and `hack/cluster.sh`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::cluster::Cluster;
use common::guest::{Guest, SLOW, condition, wait_until};

const NODE: &str = "crilet-kubeadm";

/// `hack/cluster.sh kubeadm`: the KUBEADM_* values it prints.
fn joinable() -> BTreeMap<String, String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(repo.join("hack/cluster.sh"))
        .arg("kubeadm")
        .output()
        .expect("run hack/cluster.sh kubeadm");
    assert!(
        out.status.success(),
        "hack/cluster.sh kubeadm failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("KUBEADM_"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn deployment(namespace: &str, image: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: app, namespace: {namespace}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: app}}}}
  template:
    metadata: {{labels: {{app: app}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: {NODE}}}
      terminationGracePeriodSeconds: 2
      containers:
      - name: app
        image: {image}
        imagePullPolicy: IfNotPresent
        command: [sh, -c, "cat /etc/resolv.conf; exec sleep 3600"]
"#
    )
}

/// Takes the node out as an operator does, and leaves the guest as [`Guest::fresh`] expects:
/// `kubeadm reset` (stops "kubelet", removes the pods' containers and kubeadm's files), the
/// drop-in and the alias gone, the package purged, the Node deleted. Whether all of it worked.
fn take_out(g: &Guest, cluster: &Cluster) -> bool {
    let reset = g.sh("if command -v kubeadm >/dev/null; then kubeadm reset -f >/var/tmp/kubeadm-reset.log 2>&1 || { cat /var/tmp/kubeadm-reset.log; exit 1; }; fi");
    let rest = g.sh("rm -f /etc/systemd/system/kubelet.service /etc/systemd/system/crilet.service.d/10-kubeadm.conf; if dpkg -s crilet >/dev/null 2>&1; then DEBIAN_FRONTEND=noninteractive apt-get purge -y crilet >/dev/null 2>&1; fi; systemctl daemon-reload");
    let _ = cluster.kubectl(&["delete", "node", NODE, "--wait=true"]);
    reset.status.success() && rest.status.success()
}

/// Takes the node out when the test ends, passed or not: the guest leg's next tests need the
/// guest without kubeadm's drop-in (crilet.service would not start without kubeadm's files).
struct TakeOut<'a>(&'a Guest, &'a Cluster);

impl Drop for TakeOut<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            take_out(self.0, self.1);
        }
    }
}

#[test]
#[ignore = "needs hack/guest.sh up and hack/cluster.sh (hack/test.sh's guest leg)"]
fn kubeadm_join_brings_up_a_crilet_node_that_runs_a_deployment() {
    let cluster = Cluster::load();
    // Not Guest::fresh: this node never had hack/install.sh's copy, and `kubeadm reset` below
    // takes away whatever an earlier test or run left (pods included).
    let g = Guest::attach();
    g.uninstall_dev_copy();
    let join = joinable();
    // kubeadm in the guest, from the guest's disk (exec over 9p is slow under TCG).
    std::fs::copy(&join["KUBEADM_BIN"], g.share().join("kubeadm")).expect("copy kubeadm into the share");
    g.ok("install -m 0755 /mnt/host/kubeadm /usr/local/bin/kubeadm");
    assert!(take_out(&g, &cluster), "kubeadm reset before the test failed");
    let _take_out = TakeOut(&g, &cluster);

    // The node as its operator prepares it: containerd on the systemd cgroup driver (kubeadm's
    // KubeletConfiguration says cgroupDriver: systemd), crilet from its package, then the
    // README's two steps for kubeadm.
    let version = env!("CARGO_PKG_VERSION").replace('-', "~");
    let deb = g.package(&format!("{version}+kubeadm"));
    g.ok("sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' /etc/containerd/config.toml && systemctl restart containerd");
    g.ok(&format!("DEBIAN_FRONTEND=noninteractive apt-get install -y {deb} >/dev/null 2>&1"));
    g.ok("install -D -m 0644 /usr/share/crilet/kubeadm.conf /etc/systemd/system/crilet.service.d/10-kubeadm.conf && ln -s /lib/systemd/system/crilet.service /etc/systemd/system/kubelet.service && systemctl daemon-reload");
    assert_eq!(g.ok("systemctl show -p Id --value kubelet"), "crilet.service", "kubelet.service is crilet");

    let endpoint = g.env.get("CRILET_GUEST_API_SERVER").trim_start_matches("https://").to_string();
    let out = g.sh(&format!(
        "kubeadm join {endpoint} --token {} --discovery-token-ca-cert-hash {} --node-name {NODE} --ignore-preflight-errors=KubeletVersion,SystemVerification 2>&1",
        join["KUBEADM_TOKEN"], join["KUBEADM_CA_CERT_HASH"]
    ));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "kubeadm join failed:\n{said}\nagent: {}",
        g.ok("journalctl -u crilet --no-pager -n 40 || true")
    );
    assert!(said.contains("This node has joined the cluster"), "kubeadm join said:\n{said}");

    // What kubeadm left: its flags (the node's name is not the guest's hostname), the
    // kubeconfig crilet wrote after its TLS bootstrap, and the certificate the cluster signed.
    assert!(
        g.ok("cat /var/lib/kubelet/kubeadm-flags.env").contains(&format!("--hostname-override={NODE}")),
        "kubeadm-flags.env names the node"
    );
    g.ok("test -s /etc/kubernetes/kubelet.conf && test ! -e /etc/kubernetes/bootstrap-kubelet.conf");
    let pem = g.ok("cat /var/lib/crilet/pki/kubelet-client-current.pem");
    let mut openssl = Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-issuer"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run openssl");
    std::io::Write::write_all(&mut openssl.stdin.take().expect("stdin"), pem.as_bytes())
        .expect("pem to openssl");
    let names = String::from_utf8_lossy(&openssl.wait_with_output().expect("openssl").stdout).to_string();
    assert!(names.contains(&format!("system:node:{NODE}")), "the client certificate: {names}");

    let node = wait_until("the kubeadm node Ready", SLOW, || {
        cluster.get_json(&["node", NODE]).filter(|n| condition(n, "Ready")["status"] == "True")
    });
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], NODE);

    let namespace = format!("kubeadm-{:04x}", fastrand::u16(..));
    cluster.kubectl_ok(&["create", "namespace", &namespace]);
    cluster.apply(&deployment(&namespace, &g.env.get("CRILET_IMAGE_BUSYBOX")));
    wait_until("the Deployment available on the kubeadm node", SLOW, || {
        cluster
            .get_json(&["deployment", "-n", &namespace, "app"])
            .filter(|d| d["status"]["availableReplicas"] == 1)
    });
    // The pod's resolver is the cluster's, from kubeadm's KubeletConfiguration (clusterDNS: the
    // tenth address of the service range, clusterDomain cluster.local).
    let resolv = g.wait(
        "the pod's resolv.conf in its log",
        SLOW,
        &format!("cat /var/log/pods/{namespace}_app-*/app/0.log | grep -q ndots && cat /var/log/pods/{namespace}_app-*/app/0.log"),
    );
    assert!(resolv.contains("nameserver 10.0.0.10"), "the pod's resolv.conf:\n{resolv}");
    assert!(
        resolv.contains(&format!("search {namespace}.svc.cluster.local svc.cluster.local cluster.local")),
        "the pod's resolv.conf:\n{resolv}"
    );

    // The pods go while the node is still there to stop them (a reset node stops nothing).
    cluster.kubectl_ok(&["delete", "namespace", &namespace, "--wait=true", "--timeout=180s"]);
    assert!(take_out(&g, &cluster), "kubeadm reset or the purge failed");
    g.ok("test ! -e /etc/kubernetes/kubelet.conf && ! systemctl is-active --quiet crilet");
}
