//! The two node agents under test, each started fresh for its phase and stopped after it: the
//! upstream kubelet (hack/cluster.sh's build, node `localhost`) and crilet (this build, node
//! `crilet-bench`), both on the same containerd and the same control plane.
//!
//! They never run at the same time: the kubelet kills every running pod of the runtime that it
//! does not know (its orphan cleanup), crilet's included.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::Env;
pub use crate::host::{cgroup_root, clean_dir, unmount_under};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Kubelet,
    Crilet,
}

impl Kind {
    pub fn node(self) -> &'static str {
        match self {
            // The kubelet refuses a loopback --node-ip; named `localhost`, it finds its name in
            // /etc/hosts (127.0.0.1, skipped as loopback) and never asks a DNS server.
            Kind::Kubelet => "localhost",
            Kind::Crilet => "crilet-bench",
        }
    }

    /// The agent's kubelet API port.
    pub fn port(self) -> u16 {
        match self {
            Kind::Kubelet => KUBELET_PORT,
            Kind::Crilet => CRILET_PORT,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Kubelet => "kubelet",
            Kind::Crilet => "crilet",
        }
    }
}

pub struct Agent {
    pub kind: Kind,
    pub pid: u32,
    pub log: PathBuf,
    child: Option<Child>,
}

/// A node identity written by `hack/cluster.sh node NAME` (its env file).
fn identity(env: &Env, node: &str) -> std::collections::HashMap<String, String> {
    testkit::EnvFile::load(
        env.nodes_dir.join(node).join("env"),
        "hack/bench-cluster.sh writes the node identities",
    )
    .vars
}

/// The kubelet's configuration: loopback only, its node's certificates, and the benchmark
/// kubelet's settings (`host::kubelet_node_config`); logs and state in `dir`.
fn kubelet_config(env: &Env, dir: &Path) -> String {
    let id = identity(env, Kind::Kubelet.node());
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
rotateCertificates: false
{node}"#,
        port = KUBELET_PORT,
        healthz = KUBELET_PORT + 8,
        cert = id["CRILET_NODE_TLS_CERT"],
        key = id["CRILET_NODE_TLS_KEY"],
        ca = id["CRILET_CLUSTER_CA"],
        node = crate::host::kubelet_node_config(&env.endpoint, &dir.join("logs")),
    )
}

pub const KUBELET_PORT: u16 = 10450;
pub const CRILET_PORT: u16 = 10550;

impl Agent {
    /// Starts `kind` with its state in `dir/<kind>` (made fresh).
    pub fn start(env: &Env, kind: Kind) -> Agent {
        let dir = env.dir.join(kind.label());
        if dir.exists() {
            clean_dir(&dir);
        }
        std::fs::create_dir_all(&dir).expect("mkdir agent dir");
        let log = dir.join(format!("{}.log", kind.label()));
        let id = identity(env, kind.node());
        let child = match kind {
            Kind::Kubelet => {
                crate::host::note_kube_chains();
                cgroup_root(true);
                let config = dir.join("config.yaml");
                std::fs::write(&config, kubelet_config(env, &dir)).expect("kubelet config");
                let mut c = Command::new(&env.kubelet_bin);
                c.arg("--config")
                    .arg(&config)
                    .arg("--kubeconfig")
                    .arg(&id["CRILET_NODE_KUBECONFIG"])
                    .arg("--root-dir")
                    .arg(dir.join("root"))
                    .args(["--hostname-override", kind.node(), "--v", "1"]);
                // Its own process group: a Ctrl-C of the benchmark reaches only the benchmark,
                // whose cleanup removes the pods before it stops the agent.
                testkit::spawn_logged(c, &log, true, true)
            }
            Kind::Crilet => {
                let mut c = testkit::AgentCmd::in_dir(&env.crilet_bin, &env.endpoint, &dir);
                std::fs::create_dir_all(&c.manifests).expect("mkdir manifests");
                c.node_name = Some(kind.node().into());
                c.args = [
                    "--node-ip",
                    "127.0.0.1",
                    "--port",
                    &CRILET_PORT.to_string(),
                    "--kubeconfig",
                    &id["CRILET_NODE_KUBECONFIG"],
                    "--tls-cert-file",
                    &id["CRILET_NODE_TLS_CERT"],
                    "--tls-private-key-file",
                    &id["CRILET_NODE_TLS_KEY"],
                    "--client-ca-file",
                    &id["CRILET_CLUSTER_CA"],
                ]
                .map(String::from)
                .to_vec();
                c.log = log.clone();
                c.stdout_to_log = true;
                // Its own process group (AgentCmd's default), as the kubelet's.
                c.spawn()
            }
        };
        eprintln!("  {} pid {} (log {})", kind.label(), child.id(), log.display());
        Agent { kind, pid: child.id(), log, child: Some(child) }
    }

    /// Waits until the Node is Ready and carries no not-ready/unreachable taint.
    pub async fn wait_ready(&mut self, nodes: &Api<Node>) {
        let (kind, log, child) = (self.kind, &self.log, &mut self.child);
        let what = format!("node {} to be Ready and untainted (see {})", kind.node(), log.display());
        testkit::wait_until(&what, Duration::from_secs(180), Duration::from_millis(200), || {
            if let Some(child) = child.as_mut() {
                testkit::assert_alive(child, &format!("the {}", kind.label()), &log.display().to_string());
            }
            async move {
                let n = nodes.get(kind.node()).await.ok()?;
                let ready = n
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                let tainted = n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|ts| {
                    ts.iter().any(|t| {
                        t.key == "node.kubernetes.io/not-ready" || t.key == "node.kubernetes.io/unreachable"
                    })
                });
                (ready && !tainted).then_some(())
            }
        })
        .await;
    }

    /// (VmRSS, VmHWM) in KiB.
    pub fn memory(&self) -> (u64, u64) {
        crate::node_agent::memory(self.pid)
    }

    /// utime + stime in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let text = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        let Some(end) = text.rfind(')') else { return 0.0 };
        // Fields after the command (which may hold spaces) start at the state, field 3.
        let f: Vec<&str> = text[end + 2..].split_whitespace().collect();
        let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        ticks as f64 / clk_tck()
    }

    /// SIGTERM by PID, SIGKILL after 15 s; then the kubelet's cgroup root goes too.
    pub async fn stop(mut self) {
        if let Some(child) = self.child.take() {
            crate::node_agent::stop_child(child).await;
        }
        if self.kind == Kind::Kubelet {
            let root = self.log.parent().map(|d| d.join("root"));
            if let Some(root) = root {
                unmount_under(&root);
            }
            cgroup_root(false);
            crate::host::remove_new_kube_chains();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            testkit::kill(&mut child);
        }
    }
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux if that fails).
fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}
