//! The upstream kubelet as the peer of the `scale` scenario: the node agent users would run
//! instead of crilet. Built from its Go module by `hack/cluster.sh build kubelet` (hack/bench.sh
//! passes its path in `CRILET_BENCH_KUBELET_BIN`), run standalone, without an API server, on the
//! same containerd, its pods static pods from a manifest directory, as crilet's are. Observed
//! the same way as crilet: running through CRI, Ready through the pod list the agent itself
//! serves (the kubelet's read-only port, 127.0.0.1 only, where crilet has its control socket).
//!
//! The kubelet kills every running pod of the runtime that it does not know (its orphan
//! cleanup), so it runs only while no other pod does: it refuses to start otherwise.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crilet::cri::CriClient;
use crilet::cri::api;
use crilet::model::keys;

use crate::agent::{Leftovers, stop_child};
use crate::host::{cgroup_root, clean_dir, kubelet_node_config};

/// The kubelet's pods.
pub const KUBELET_NS: &str = "bench-node-kubelet";
/// Its node name: a static pod's name is the manifest's plus `-<node name>`. With `localhost` it
/// finds its name in /etc/hosts and never asks a DNS server (it refuses a loopback node IP).
pub const NODE: &str = "localhost";
const PORT: u16 = 10460;
const READ_ONLY_PORT: u16 = 10461;
const HEALTHZ_PORT: u16 = 10462;

/// The kubelet binary, when the run has one.
pub fn bin() -> Option<PathBuf> {
    std::env::var_os("CRILET_BENCH_KUBELET_BIN").filter(|v| !v.is_empty()).map(PathBuf::from)
}

pub struct Kubelet {
    pub pid: u32,
    pub dir: PathBuf,
    pub manifests: PathBuf,
    left: Arc<Leftovers>,
}

/// Standalone: no kubeconfig, anonymous access to its own API on 127.0.0.1 only, its static pods
/// from `manifests`, and the benchmark kubelet's settings (`host::kubelet_node_config`).
fn config(endpoint: &str, dir: &Path, manifests: &Path) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {PORT}
readOnlyPort: {READ_ONLY_PORT}
healthzBindAddress: 127.0.0.1
healthzPort: {HEALTHZ_PORT}
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
staticPodPath: {manifests}
{node}"#,
        manifests = manifests.display(),
        node = kubelet_node_config(endpoint, &dir.join("logs")),
    )
}

impl Kubelet {
    /// Starts a kubelet in `dir` (made fresh) and waits until its health check passes.
    pub async fn start(
        bin: &Path,
        cri: &CriClient,
        endpoint: &str,
        dir: PathBuf,
        left: Arc<Leftovers>,
    ) -> Kubelet {
        let others = crate::host::foreign_pods(cri, KUBELET_NS).await;
        assert!(
            others.is_empty(),
            "the runtime runs pods the benchmark did not start ({}): the kubelet would kill them. Run this on a quiet machine.",
            others.join(", ")
        );
        clean_dir(&dir);
        let manifests = dir.join("manifests");
        std::fs::create_dir_all(&manifests).expect("mkdir kubelet manifests");
        for d in [&dir, &manifests] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let config_path = dir.join("config.yaml");
        std::fs::write(&config_path, config(endpoint, &dir, &manifests)).expect("kubelet config");
        crate::host::note_kube_chains();
        cgroup_root(true);
        let mut cmd = Command::new(bin);
        cmd.arg("--config").arg(&config_path).arg("--root-dir").arg(dir.join("root")).args([
            "--hostname-override",
            NODE,
            "--v",
            "1",
        ]);
        // Its own process group, as crilet's: the cleanup stops it after its pods.
        let child = testkit::spawn_logged(cmd, &dir.join("kubelet.log"), true, true);
        let pid = child.id();
        *left.kubelet.lock().unwrap() = Some((child, dir.clone()));
        let kubelet = Kubelet { pid, dir, manifests, left };
        let what = format!("the kubelet to come up (see {}/kubelet.log)", kubelet.dir.display());
        testkit::wait_until(&what, Duration::from_secs(120), Duration::from_millis(100), || async {
            kubelet.check_alive();
            get(HEALTHZ_PORT, "/healthz").await.filter(|(status, _)| *status == 200).map(drop)
        })
        .await;
        eprintln!("  kubelet pid {pid} up (standalone, node {NODE})");
        kubelet
    }

    fn check_alive(&self) {
        if let Some((child, _)) = self.left.kubelet.lock().unwrap().as_mut() {
            testkit::assert_alive(child, "the kubelet", &format!("{}/kubelet.log", self.dir.display()));
        }
    }

    /// Its pods of `namespace` as its read-only API serves them (v1.Pod JSON; a standalone
    /// kubelet fills in its static pods' status there).
    pub async fn list_pods(&self, namespace: &str) -> Vec<serde_json::Value> {
        self.check_alive();
        let Some((200, body)) = get(READ_ONLY_PORT, "/pods").await else { return vec![] };
        let list: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["namespace"] == namespace)
            .cloned()
            .collect()
    }

    /// Removes every manifest, waits until the kubelet has stopped its pods, stops it, then
    /// removes what it leaves for its garbage collection (stopped sandboxes and containers),
    /// its mounts, cgroup root and directory.
    pub async fn stop(self, cri: &CriClient) {
        crate::agent::remove_manifests(&self.manifests);
        testkit::wait_until(
            "the kubelet to stop its pods",
            Duration::from_secs(300),
            Duration::from_millis(100),
            || async { running_pods_of(cri, KUBELET_NS).await.is_empty().then_some(()) },
        )
        .await;
        stop(cri, &self.left).await;
    }
}

/// Stops the kubelet that runs, if any (by PID), and removes what it leaves.
pub async fn stop(cri: &CriClient, left: &Leftovers) {
    let taken = left.kubelet.lock().unwrap().take();
    let Some((child, dir)) = taken else { return };
    stop_child(child).await;
    crate::host::remove_runtime_leftovers(cri, KUBELET_NS).await;
    clean_dir(&dir);
    cgroup_root(false);
    crate::host::remove_new_kube_chains();
}

/// IDs of the ready sandboxes and running containers of `namespace`.
async fn running_pods_of(cri: &CriClient, namespace: &str) -> Vec<String> {
    let Ok((sandboxes, containers)) = cri.list_all(Some((keys::POD_NAMESPACE, namespace))).await else {
        return vec![String::from("(the runtime did not answer)")];
    };
    let ready =
        sandboxes.iter().filter(|s| s.state == api::PodSandboxState::SandboxReady as i32).map(|s| &s.id);
    let running =
        containers.iter().filter(|c| c.state == api::ContainerState::ContainerRunning as i32).map(|c| &c.id);
    ready.chain(running).cloned().collect()
}

/// One GET to 127.0.0.1:`port`: (status, body), or None when it cannot connect.
async fn get(port: u16, path: &str) -> Option<(u16, Vec<u8>)> {
    use http_body_util::{BodyExt, Empty};
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header(http::header::HOST, format!("127.0.0.1:{port}"))
        .body(Empty::<hyper::body::Bytes>::new())
        .ok()?;
    let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req)).await.ok()?.ok()?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.ok()?.to_bytes().to_vec();
    Some((status, body))
}
