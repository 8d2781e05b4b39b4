//! Harness for the cluster-mode tests: the real control plane `hack/cluster.sh` started (its env
//! file), kubectl with the admin identity, and one crilet node per test (its own node name,
//! identity, namespace and kubelet-API port) joined to it.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use testkit::EnvFile;

use super::{Agent, wait_for};

/// The control plane, as the admin sees it.
pub struct Cluster {
    pub env: EnvFile,
}

/// hack/cluster.sh's env files: the control plane's and the node identities'.
fn read_env(path: &str) -> EnvFile {
    EnvFile::load(path, "run `hack/cluster.sh` first (or the whole suite with `hack/test.sh`)")
}

impl Cluster {
    pub fn load() -> Cluster {
        Cluster { env: read_env(testkit::CLUSTER_ENV_FILE) }
    }

    pub fn get(&self, k: &str) -> String {
        self.env.get(k)
    }

    /// Runs kubectl as the admin, with `stdin` if given: (ok, stdout, stderr).
    pub fn kubectl_in(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        let mut cmd = Command::new(self.get("CRILET_KUBECTL"));
        cmd.arg("--kubeconfig")
            .arg(self.get("CRILET_CLUSTER_KUBECONFIG"))
            .arg("--cache-dir")
            .arg(self.get("CRILET_KUBECTL_CACHE_DIR"))
            .args(args)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("run kubectl");
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).expect("kubectl stdin");
        }
        let out = child.wait_with_output().expect("kubectl output");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        self.kubectl_in(args, None)
    }

    /// kubectl that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl(args);
        assert!(ok, "kubectl {args:?} failed: {err}{out}");
        out
    }

    /// `kubectl apply -f -` with `yaml`, which must succeed.
    pub fn apply(&self, yaml: &str) {
        let (ok, out, err) = self.kubectl_in(&["apply", "-f", "-"], Some(yaml));
        assert!(ok, "kubectl apply failed: {err}{out}\n{yaml}");
    }

    /// `kubectl create -f -` with `yaml`, which must succeed.
    pub fn create(&self, yaml: &str) {
        let (ok, out, err) = self.kubectl_in(&["create", "-f", "-"], Some(yaml));
        assert!(ok, "kubectl create failed: {err}{out}\n{yaml}");
    }

    /// `kubectl get ARGS -o json`, or None when it fails (not found).
    pub fn get_json(&self, args: &[&str]) -> Option<Value> {
        let mut a: Vec<&str> = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        let (ok, out, _) = self.kubectl(&a);
        if !ok {
            return None;
        }
        serde_json::from_str(&out).ok()
    }

    /// Writes node `name`'s identity with `hack/cluster.sh node` and returns its env.
    pub fn node_identity(&self, name: &str) -> HashMap<String, String> {
        self.cluster_sh("node", name, "env")
    }

    /// Writes node `name`'s bootstrap kubeconfig with `hack/cluster.sh bootstrap-kubeconfig`
    /// and returns its env (`CRILET_NODE_BOOTSTRAP_KUBECONFIG`, ...).
    pub fn bootstrap_identity(&self, name: &str) -> HashMap<String, String> {
        self.cluster_sh("bootstrap-kubeconfig", name, "bootstrap-env")
    }

    /// `hack/cluster.sh COMMAND NAME`, then the env file it wrote in the node's directory.
    fn cluster_sh(&self, command: &str, name: &str, env_file: &str) -> HashMap<String, String> {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hack/cluster.sh");
        let out = Command::new("bash").arg(script).args([command, name]).output().expect("hack/cluster.sh");
        assert!(
            out.status.success(),
            "hack/cluster.sh {command} {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        read_env(&format!("{}/{name}/{env_file}", self.get("CRILET_CLUSTER_NODES_DIR"))).vars
    }
}

/// One crilet node of the cluster and the namespace its test uses.
pub struct Node {
    pub agent: Agent,
    pub cluster: Cluster,
    pub name: String,
    pub namespace: String,
    pub port: u16,
    pub identity: HashMap<String, String>,
}

impl Node {
    /// Joins a fresh crilet node `crilet-<test>` (kubelet API on `port`), with a namespace of the
    /// same name; an earlier run's Node and namespace are deleted first.
    pub async fn start(test: &str, port: u16, extra: &[&str]) -> Node {
        Self::start_on(test, port, None, extra).await
    }

    /// [`Node::start`] on the CRI `endpoint` (a containerd of the test's own) when given.
    pub async fn start_on(test: &str, port: u16, endpoint: Option<&str>, extra: &[&str]) -> Node {
        let (cluster, name, namespace) = Self::fresh(test).await;
        let identity = cluster.node_identity(&name);
        let credentials = [
            "--kubeconfig",
            &identity["CRILET_NODE_KUBECONFIG"],
            "--tls-cert-file",
            &identity["CRILET_NODE_TLS_CERT"],
            "--tls-private-key-file",
            &identity["CRILET_NODE_TLS_KEY"],
            "--client-ca-file",
            &identity["CRILET_CLUSTER_CA"],
        ]
        .map(String::from);
        Self::join(test, port, endpoint, extra, (cluster, name, namespace), &credentials, identity).await
    }

    /// Joins a fresh node `crilet-<test>` as a real node joins: with only a bootstrap
    /// kubeconfig (`hack/cluster.sh bootstrap-kubeconfig`), `--kubeconfig` at `kubeconfig`
    /// (not there yet) and the default `--cert-dir` (`<root-dir>/pki`). No kubelet API (its
    /// serving certificate is not this node's to make here).
    pub async fn start_bootstrapped(test: &str, port: u16, kubeconfig: &Path, extra: &[&str]) -> Node {
        let (cluster, name, namespace) = Self::fresh(test).await;
        let identity = cluster.bootstrap_identity(&name);
        let credentials = [
            "--bootstrap-kubeconfig".to_string(),
            identity["CRILET_NODE_BOOTSTRAP_KUBECONFIG"].clone(),
            "--kubeconfig".to_string(),
            kubeconfig.display().to_string(),
        ];
        Self::join(test, port, None, extra, (cluster, name, namespace), &credentials, identity).await
    }

    /// Starts the agent of node `name` with its `credentials` flags, on 127.0.0.1 and `port`.
    async fn join(
        test: &str,
        port: u16,
        endpoint: Option<&str>,
        extra: &[&str],
        (cluster, name, namespace): (Cluster, String, String),
        credentials: &[String],
        identity: HashMap<String, String>,
    ) -> Node {
        let port_s = port.to_string();
        let labels = format!("crilet.io/test={name}");
        let mut args: Vec<&str> = credentials.iter().map(String::as_str).collect();
        args.extend([
            "--node-ip",
            "127.0.0.1",
            "--port",
            &port_s,
            "--node-labels",
            &labels,
            "--node-name",
            &name,
        ]);
        args.extend_from_slice(extra);
        let agent = match endpoint {
            Some(e) => Agent::start_with_endpoint_args(test, e, &args, &[]).await,
            None => Agent::start_with_args(test, &args, &[]).await,
        };
        Node { agent, cluster, name, namespace, port, identity }
    }

    /// The cluster, node name `crilet-<test>` and a new namespace for a test's node, with what
    /// an earlier run of it left removed.
    async fn fresh(test: &str) -> (Cluster, String, String) {
        let cluster = Cluster::load();
        let name = format!("crilet-{}", test.replace('_', "-"));
        // What an earlier run left: its containers (no agent will stop them), its pods (force:
        // no node confirms them), its Node. Every run gets a namespace of its own.
        remove_api_pods_of(&name).await;
        let _ = cluster.kubectl(&[
            "delete",
            "pods",
            "-A",
            "--field-selector",
            &format!("spec.nodeName={name}"),
            "--force",
            "--grace-period=0",
        ]);
        let _ = cluster.kubectl(&["delete", "node", &name, "--wait=true"]);
        let namespace = format!("{name}-{:04x}", fastrand::u16(..));
        cluster.kubectl_ok(&["create", "namespace", &namespace]);
        (cluster, name, namespace)
    }

    /// Waits until the Node is Ready in the API and the node lifecycle controller has lifted
    /// its not-ready taint (so kube-scheduler places pods on it).
    pub async fn wait_ready(&self) -> Value {
        wait_for("the Node to be Ready and untainted", Duration::from_secs(90), || async {
            let n = self.cluster.get_json(&["node", &self.name])?;
            let ready = n["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let tainted = n["spec"]["taints"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["key"] == "node.kubernetes.io/not-ready"));
            (ready && !tainted).then_some(n)
        })
        .await
    }

    /// The pod `name` of the test's namespace, as the API shows it.
    pub fn api_pod(&self, name: &str) -> Option<Value> {
        self.cluster.get_json(&["pod", "-n", &self.namespace, name])
    }

    /// kubectl in the test's namespace.
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let mut a: Vec<&str> = vec!["-n", &self.namespace];
        a.extend_from_slice(args);
        self.cluster.kubectl(&a)
    }

    /// `kubectl apply` in the test's namespace.
    pub fn apply(&self, yaml: &str) {
        let (ok, out, err) =
            self.cluster.kubectl_in(&["-n", &self.namespace, "apply", "-f", "-"], Some(yaml));
        assert!(ok, "kubectl apply failed: {err}{out}\n{yaml}\nagent log:\n{}", self.agent.log());
    }

    /// Waits until the API pod `name` satisfies `pred` (`what` names the wait).
    pub async fn wait_pod(
        &self,
        name: &str,
        what: &str,
        limit: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let what = format!("pod {name}: {what}");
        wait_for(&what, limit, || async {
            let p = self.api_pod(name)?;
            pred(&p).then_some(p)
        })
        .await
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.agent.stop();
        // No agent stops them now: remove the node's containers, then its API objects.
        let node = self.name.clone();
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Runtime::new() {
                rt.block_on(remove_api_pods_of(&node));
            }
        })
        .join();
        let selector = format!("spec.nodeName={}", self.name);
        let _ = self.cluster.kubectl(&[
            "delete",
            "pods",
            "-A",
            "--field-selector",
            &selector,
            "--force",
            "--grace-period=0",
        ]);
        let _ = self.cluster.kubectl(&["delete", "namespace", &self.namespace, "--wait=false"]);
        // The node's own Events (every node records its pressure conditions' first status).
        let _ = self.cluster.kubectl(&[
            "delete",
            "events",
            "-n",
            "default",
            "--field-selector",
            &format!("involvedObject.kind=Node,involvedObject.name={}", self.name),
        ]);
        let _ = self.cluster.kubectl(&["delete", "node", &self.name, "--wait=false"]);
    }
}

/// Stops and removes every sandbox of node `node`'s API pods, through containerd itself.
pub async fn remove_api_pods_of(node: &str) {
    let cri = super::Env::load().cri();
    let Ok((sandboxes, _)) = cri.list_all(Some((crilet::model::keys::MANAGED_BY, "crilet"))).await else {
        return;
    };
    for sb in sandboxes {
        let file = sb.annotations.get(crilet::model::keys::MANIFEST_FILE).map_or("", String::as_str);
        if matches!(crilet::model::PodSource::parse(file), crilet::model::PodSource::Api { node: n } if n == node)
        {
            let _ = cri.stop_sandbox(&sb.id).await;
            let _ = cri.remove_sandbox(&sb.id).await;
        }
    }
}

/// The API pod's condition `t`'s status.
pub fn api_condition<'a>(p: &'a Value, t: &str) -> Option<&'a str> {
    p["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == t)?["status"].as_str()
}
