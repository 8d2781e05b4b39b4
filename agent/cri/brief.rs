//! The relist's view of the runtime: every sandbox and container decoded only as far as the
//! PLEG needs (ID, state, pod UID).
//!
//! Why: the relist runs every second over everything the node runs. The full list views carry
//! every label and annotation (a sandbox carries its whole pod spec, `crilet.io/pod-spec`), and
//! decoding them into hash maps was about a third of the agent's steady CPU at 110 pods. These
//! messages are wire-compatible subsets of CRI's `PodSandbox` / `Container` (tags from
//! `api.proto`): protobuf skips the fields they leave out, and a `map<string, string>` is on
//! the wire a repeated message of key 1 and value 2, read here as a plain list.

use super::api;

/// A `map<string, string>` entry.
#[derive(Clone, PartialEq, prost::Message)]
struct Entry {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(string, tag = "2")]
    value: String,
}

/// `runtime.v1.PodSandbox`: id = 1, state = 3, labels = 5.
#[derive(Clone, PartialEq, prost::Message)]
struct BriefSandbox {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(int32, tag = "3")]
    state: i32,
    #[prost(message, repeated, tag = "5")]
    labels: Vec<Entry>,
}

/// `runtime.v1.Container`: id = 1, state = 6, labels = 8.
#[derive(Clone, PartialEq, prost::Message)]
struct BriefContainer {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(int32, tag = "6")]
    state: i32,
    #[prost(message, repeated, tag = "8")]
    labels: Vec<Entry>,
}

/// `runtime.v1.ListPodSandboxResponse`: items = 1.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct BriefSandboxes {
    #[prost(message, repeated, tag = "1")]
    items: Vec<BriefSandbox>,
}

/// `runtime.v1.ListContainersResponse`: containers = 1.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct BriefContainers {
    #[prost(message, repeated, tag = "1")]
    containers: Vec<BriefContainer>,
}

/// One sandbox or container as the relist sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brief {
    pub id: String,
    /// The CRI state (`PodSandboxState` or `ContainerState`).
    pub state: i32,
    /// Its `io.kubernetes.pod.uid` label: objects without one are not a pod's.
    pub uid: Option<String>,
}

impl Brief {
    /// For a sandbox: whether it is ready.
    pub fn sandbox_ready(&self) -> bool {
        self.state == api::PodSandboxState::SandboxReady as i32
    }
}

fn uid_of(labels: Vec<Entry>) -> Option<String> {
    labels.into_iter().find(|e| e.key == crate::model::keys::POD_UID).map(|e| e.value)
}

impl BriefSandboxes {
    pub(super) fn into_briefs(self) -> Vec<Brief> {
        self.items.into_iter().map(|s| Brief { id: s.id, state: s.state, uid: uid_of(s.labels) }).collect()
    }
}

impl BriefContainers {
    pub(super) fn into_briefs(self) -> Vec<Brief> {
        self.containers
            .into_iter()
            .map(|c| Brief { id: c.id, state: c.state, uid: uid_of(c.labels) })
            .collect()
    }
}

/// Sandboxes and containers of every pod, as the relist sees them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RuntimeBrief {
    pub sandboxes: Vec<Brief>,
    pub containers: Vec<Brief>,
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use prost::Message;

    use super::*;

    /// The full messages, encoded as a runtime sends them, read back through the brief ones.
    #[test]
    fn briefs_read_the_full_list_views() {
        let labels = |uid: Option<&str>| -> HashMap<String, String> {
            let mut m = HashMap::from([("app".to_string(), "web".to_string())]);
            if let Some(u) = uid {
                m.insert(crate::model::keys::POD_UID.into(), u.into());
            }
            m
        };
        let annotations = HashMap::from([("crilet.io/pod-spec".to_string(), "{\"spec\":{}}".repeat(50))]);
        let full = api::ListPodSandboxResponse {
            items: vec![
                api::PodSandbox {
                    id: "sb1".into(),
                    state: api::PodSandboxState::SandboxReady as i32,
                    created_at: 7,
                    labels: labels(Some("u1")),
                    annotations: annotations.clone(),
                    metadata: Some(api::PodSandboxMetadata { name: "p".into(), ..Default::default() }),
                    runtime_handler: "runc".into(),
                },
                api::PodSandbox {
                    id: "sb2".into(),
                    state: api::PodSandboxState::SandboxNotready as i32,
                    labels: labels(None),
                    ..Default::default()
                },
            ],
        };
        let got = BriefSandboxes::decode(full.encode_to_vec().as_slice()).expect("decodes").into_briefs();
        assert_eq!(
            got,
            vec![
                Brief { id: "sb1".into(), state: 0, uid: Some("u1".into()) },
                Brief { id: "sb2".into(), state: 1, uid: None },
            ]
        );
        assert!(got[0].sandbox_ready() && !got[1].sandbox_ready());

        let full = api::ListContainersResponse {
            containers: vec![api::Container {
                id: "c1".into(),
                pod_sandbox_id: "sb1".into(),
                image: Some(api::ImageSpec { image: "busybox".into(), ..Default::default() }),
                image_ref: "sha256:1".into(),
                state: api::ContainerState::ContainerExited as i32,
                created_at: 9,
                labels: labels(Some("u1")),
                annotations,
                image_id: "sha256:1".into(),
                ..Default::default()
            }],
        };
        let got = BriefContainers::decode(full.encode_to_vec().as_slice()).expect("decodes").into_briefs();
        assert_eq!(got, vec![Brief { id: "c1".into(), state: 2, uid: Some("u1".into()) }]);
    }
}
