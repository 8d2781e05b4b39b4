//! The two node agents under test, each started fresh for its phase and stopped after it: the
//! upstream kubelet (hack/cluster.sh's build, node `localhost`) and crilet (this build, node
//! `crilet-bench`), both on the same containerd and the same control plane.
//!
//! They never run at the same time: the kubelet kills every running pod of the runtime that it
//! does not know (its orphan cleanup), crilet's included.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    let path = env.nodes_dir.join(node).join("env");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e} (hack/bench-cluster.sh writes the node identities)", path.display())
    });
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
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
        let out = std::fs::File::create(&log).expect("agent log");
        let id = identity(env, kind.node());
        let mut cmd = match kind {
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
                c
            }
            Kind::Crilet => {
                let manifests = dir.join("manifests");
                std::fs::create_dir_all(&manifests).expect("mkdir manifests");
                let mut c = Command::new(&env.crilet_bin);
                c.args(["run", "--container-runtime-endpoint", &env.endpoint, "--pod-manifest-path"])
                    .arg(&manifests)
                    .arg("--root-dir")
                    .arg(dir.join("root"))
                    .arg("--pod-logs-dir")
                    .arg(dir.join("logs"))
                    .args(["--container-logs-dir", ""])
                    .arg("--control-socket")
                    .arg(dir.join("crilet.sock"))
                    .args(["--node-name", kind.node(), "--node-ip", "127.0.0.1", "--port"])
                    .arg(CRILET_PORT.to_string())
                    .arg("--kubeconfig")
                    .arg(&id["CRILET_NODE_KUBECONFIG"])
                    .arg("--tls-cert-file")
                    .arg(&id["CRILET_NODE_TLS_CERT"])
                    .arg("--tls-private-key-file")
                    .arg(&id["CRILET_NODE_TLS_KEY"])
                    .arg("--client-ca-file")
                    .arg(&id["CRILET_CLUSTER_CA"])
                    .env("RUST_LOG", "info");
                c
            }
        };
        // Its own process group: a Ctrl-C of the benchmark reaches only the benchmark, whose
        // cleanup removes the pods before it stops the agent.
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log fd"))
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting the {}: {e}", kind.label()));
        eprintln!("  {} pid {} (log {})", kind.label(), child.id(), log.display());
        Agent { kind, pid: child.id(), log, child: Some(child) }
    }

    /// Waits until the Node is Ready and carries no not-ready/unreachable taint.
    pub async fn wait_ready(&mut self, nodes: &Api<Node>) {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("the {} exited ({status}); see {}", self.kind.label(), self.log.display());
                }
            }
            if let Ok(n) = nodes.get(self.kind.node()).await {
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
                if ready && !tainted {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "node {} not Ready and untainted after 180 s; see {}",
                self.kind.node(),
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
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
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
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
