//! Domain types shared by the manifest source, the pod workers, status and the control API.
//!
//! `DesiredPod` is what a manifest asks for (already defaulted and validated); `ObservedPod` is
//! what the runtime shows for one pod UID. Neither knows about tonic or the CRI protos.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

pub mod manifest;
pub mod uid;

pub use manifest::{Deleting, ManifestProblem, ManifestSet, ProblemKind};

/// A pod's identity on the node: namespace and name (what two manifests must not share).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl PodKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self { namespace: namespace.into(), name: name.into() }
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A pod as its manifest asks for it: parsed into the real Kubernetes type, defaulted as the API
/// server would, validated, with `metadata.uid` and `metadata.namespace` always set.
#[derive(Debug, Clone)]
pub struct DesiredPod {
    pub key: PodKey,
    /// The pod UID (also in `pod.metadata.uid`): stable across image-only edits, new on any other.
    pub uid: String,
    pub pod: Arc<Pod>,
    /// Where the pod comes from (a manifest file, or the API server).
    pub source: PodSource,
    /// The 0-based index of the document within the manifest file (0 for API pods).
    pub doc: usize,
    /// Fields the agent accepts but does not implement, and other non-fatal findings.
    pub warnings: Vec<String>,
}

/// Equal when every field is; the same `Arc` of the pod is equal without a walk of the spec
/// (the sets of desired pods are compared on every change of either source, and most of their
/// pods are the same allocations as before).
impl PartialEq for DesiredPod {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.uid == other.uid
            && self.source == other.source
            && self.doc == other.doc
            && self.warnings == other.warnings
            && (Arc::ptr_eq(&self.pod, &other.pod) || self.pod == other.pod)
    }
}

impl DesiredPod {
    /// The source's text form, as annotations and published records carry it.
    pub fn source_text(&self) -> String {
        self.source.text(&self.key)
    }
}

/// Where a desired pod comes from. Its text form (the `crilet.io/manifest-file` annotation of
/// its sandbox and containers, a published record's `manifest_file`) is the manifest's path for
/// a static pod and `api:<node>/<namespace>/<name>` for an API pod: never a path under the
/// manifest directory, so the file source never reaps API pods and the API source never reaps
/// static ones; the node name keeps two agents on one runtime (tests) from reaping each other's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PodSource {
    /// A static pod, from this manifest file.
    File(PathBuf),
    /// An API pod bound to node `node`.
    Api { node: String },
}

impl PodSource {
    /// The text form's prefix for API pods.
    pub const API_PREFIX: &'static str = "api:";

    /// Reads the text form back (what is not an API pod's is a manifest path, maybe empty).
    pub fn parse(text: &str) -> PodSource {
        match text.strip_prefix(Self::API_PREFIX) {
            Some(rest) => PodSource::Api { node: rest.split('/').next().unwrap_or_default().to_string() },
            None => PodSource::File(PathBuf::from(text)),
        }
    }

    /// The text form for pod `key`.
    pub fn text(&self, key: &PodKey) -> String {
        match self {
            PodSource::File(path) => path.display().to_string(),
            PodSource::Api { node } => format!("{}{node}/{}/{}", Self::API_PREFIX, key.namespace, key.name),
        }
    }

    pub fn is_api(&self) -> bool {
        matches!(self, PodSource::Api { .. })
    }

    /// A static pod's manifest file.
    pub fn manifest(&self) -> Option<&Path> {
        match self {
            PodSource::File(path) => Some(path),
            PodSource::Api { .. } => None,
        }
    }
}

/// Sandbox state as CRI reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    Ready,
    NotReady,
}

/// One pod sandbox of a pod UID, as the runtime reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedSandbox {
    pub id: String,
    pub attempt: u32,
    pub state: SandboxState,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    /// Primary IP first, then the additional ones; empty for host-network pods or while unknown.
    pub ips: Vec<String>,
    pub host_network: bool,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// Container state as CRI reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    #[default]
    Unknown,
}

/// One container instance of a pod UID, as the runtime reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObservedContainer {
    pub id: String,
    pub sandbox_id: String,
    /// The spec container name (label `io.kubernetes.container.name`).
    pub name: String,
    pub attempt: u32,
    pub state: ContainerState,
    /// Nanoseconds since the epoch; 0 when unknown.
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    /// The image as the runtime names it, and its digest reference (`imageID` in the API).
    pub image: String,
    pub image_ref: String,
    /// Annotations: `io.kubernetes.container.hash` and `io.kubernetes.container.restartCount`.
    pub hash: String,
    pub restart_count: u32,
    /// Absolute path of the CRI log file.
    pub log_path: String,
    pub annotations: BTreeMap<String, String>,
    /// The stop signal the runtime will send (CRI `ContainerStatus.stop_signal`, KEP-4960):
    /// `None` when it reports none, as runtimes without the field (containerd < 2.3) do.
    pub stop_signal: Option<String>,
    /// The cgroup values the runtime reports it applied (CRI `ContainerStatus.resources`), if it
    /// reports them.
    pub resources: Option<crate::cri_proto::LinuxContainerResources>,
    /// The identity of the container's first process as the runtime reports it (CRI
    /// `ContainerStatus.user.linux`, KEP-3619), if it reports one.
    pub user: Option<crate::cri_proto::LinuxContainerUser>,
}

/// Everything the runtime shows for one pod UID, newest first in both lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObservedPod {
    pub uid: String,
    pub sandboxes: Vec<ObservedSandbox>,
    pub containers: Vec<ObservedContainer>,
}

impl ObservedPod {
    /// The newest instance of the named container, if any.
    pub fn newest(&self, name: &str) -> Option<&ObservedContainer> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// The newest and the second-newest instance of the named container.
    pub fn newest_two(&self, name: &str) -> (Option<&ObservedContainer>, Option<&ObservedContainer>) {
        let mut it = self.containers.iter().filter(|c| c.name == name);
        (it.next(), it.next())
    }

    /// The newest sandbox, if any.
    pub fn sandbox(&self) -> Option<&ObservedSandbox> {
        self.sandboxes.first()
    }

    /// The pod IP: only from the newest sandbox and only while it is ready (R1.15).
    pub fn pod_ips(&self) -> &[String] {
        match self.sandboxes.first() {
            Some(s) if s.state == SandboxState::Ready => &s.ips,
            _ => &[],
        }
    }
}

/// Probe results of one container instance, for status: `started` is the startup probe's
/// result and `ready` the readiness probe's (`Some(true)` = Success). `None` means that probe
/// has no result; status then counts a container *with* that probe as not started / not ready.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProbeState {
    pub started: Option<bool>,
    pub ready: Option<bool>,
}

/// Well-known label and annotation keys (kubelet-compatible).
pub mod keys {
    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    /// Annotation on the pods the agent publishes: the absolute path of the pod's log directory
    /// (for `crilet logs`).
    pub const LOG_DIRECTORY: &str = "crilet.io/log-directory";
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
    pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
    pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
    pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
    pub const TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
    pub const POD_TERMINATION_GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
    pub const PRESTOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";
    pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
    pub const CONFIG_HASH: &str = "kubernetes.io/config.hash";
    pub const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
    pub const CONFIG_SEEN: &str = "kubernetes.io/config.seen";
    /// crilet's own: marks sandboxes and containers this agent manages.
    pub const MANAGED_BY: &str = "crilet.io/managed-by";
    /// crilet's own: the manifest file a sandbox's pod came from.
    pub const MANIFEST_FILE: &str = "crilet.io/manifest-file";
    /// crilet's own: the container's kind (init, sidecar, app) at creation.
    pub const CONTAINER_KIND: &str = "crilet.io/container-kind";
    /// crilet's own: the full pod spec JSON, kept on the sandbox so a pod whose manifest vanished
    /// while the agent was down can still be terminated in order with its hooks and grace.
    pub const POD_SPEC: &str = "crilet.io/pod-spec";
    /// crilet's own, on a pod the agent runs from the spec its sandbox carries because its
    /// manifest is broken or not read yet: what runs is kept as it is (`podspec::is_stand_in`).
    pub const STAND_IN: &str = "crilet.io/stand-in";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_source_reads_back_from_its_text() {
        let key = PodKey::new("prod", "web");
        let api = PodSource::Api { node: "n1".into() };
        let file = PodSource::File("/etc/kubernetes/manifests/web.yaml".into());
        // (source, its text for `key`)
        let cases = [(&api, "api:n1/prod/web"), (&file, "/etc/kubernetes/manifests/web.yaml")];
        for (source, text) in cases {
            assert_eq!(source.text(&key), text);
            assert_eq!(&PodSource::parse(text), source, "{text}");
        }
        assert!(api.is_api() && !file.is_api());
        assert_eq!(
            (api.manifest(), file.manifest()),
            (None, Some(Path::new("/etc/kubernetes/manifests/web.yaml")))
        );
        // What no annotation names (an old sandbox) is no API pod's.
        assert_eq!(PodSource::parse(""), PodSource::File(PathBuf::new()));
    }
}
