//! Mirror pods: each static pod shows in the API as a pod bound to this node, owned by the
//! Node, marked `kubernetes.io/config.mirror` (the static pod's UID, which is its config hash)
//! and `kubernetes.io/config.source: file`. A mirror pod that was deleted, or that stands for
//! an older version of its static pod, is replaced; one whose manifest is gone is deleted. The
//! static pod keeps running whatever happens to its mirror. (The status writer writes the
//! static pod's status onto its mirror.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::ClusterLink;
use super::pods::ApiPods;
use crate::model::ManifestSet;
use crate::model::{DesiredPod, PodKey, keys};

/// The annotation that marks a mirror pod; its value is the static pod's config hash (UID).
pub const MIRROR: &str = "kubernetes.io/config.mirror";

/// Is this API pod a mirror pod (never run as an API pod: its static pod runs)?
pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR))
}

/// The mirror pod of static pod `d`, owned by the Node `node` (`node_uid`).
pub fn mirror_of(d: &DesiredPod, node: &str, node_uid: &str) -> Pod {
    let mut pod = (*d.pod).clone();
    pod.status = None;
    let meta = &mut pod.metadata;
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(MIRROR.into(), d.uid.clone());
    annotations.insert(keys::CONFIG_SOURCE.into(), "file".into());
    annotations.insert(keys::CONFIG_HASH.into(), d.uid.clone());
    meta.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.to_string(),
        uid: node_uid.to_string(),
        controller: Some(true),
        ..Default::default()
    }]);
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node.to_string());
    }
    pod
}

/// What to do with the mirror pods, from the static pods and the API's view. Pure.
#[derive(Debug, Default, PartialEq)]
pub struct MirrorPlan {
    /// Static pods without a (current) mirror pod.
    pub create: Vec<PodKey>,
    /// Mirror pods to delete (name and UID): stale, deleted by someone, or without a manifest.
    pub delete: Vec<(PodKey, String)>,
}

pub fn plan(statics: &BTreeMap<PodKey, DesiredPod>, api: &ApiPods) -> MirrorPlan {
    let mut p = MirrorPlan::default();
    for (key, pod) in &api.pods {
        if !is_mirror(pod) {
            continue;
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let hash = pod.metadata.annotations.as_ref().and_then(|a| a.get(MIRROR)).cloned().unwrap_or_default();
        let current =
            statics.get(key).is_some_and(|d| d.uid == hash) && pod.metadata.deletion_timestamp.is_none();
        if !current {
            p.delete.push((key.clone(), uid));
        }
    }
    for (key, d) in statics {
        let has = api.pods.get(key).is_some_and(|m| {
            is_mirror(m)
                && m.metadata.deletion_timestamp.is_none()
                && m.metadata.annotations.as_ref().and_then(|a| a.get(MIRROR)) == Some(&d.uid)
        });
        // A non-mirror API pod of that name blocks the mirror (the API refuses the create).
        let taken = api.pods.get(key).is_some_and(|m| !is_mirror(m));
        if !has && !taken {
            p.create.push(key.clone());
        }
    }
    p
}

/// Keeps the mirror pods in line with the static pods until cancelled.
pub async fn run(
    link: Arc<ClusterLink>,
    mut files: watch::Receiver<ManifestSet>,
    mut api: watch::Receiver<ApiPods>,
    cancel: CancellationToken,
) {
    let nodes: Api<Node> = Api::all(link.client.clone());
    let mut node_uid = String::new();
    let mut retry = tokio::time::interval(Duration::from_secs(2));
    // The static pods, copied when they change (not on every change of the API's pods).
    let mut statics = files.borrow_and_update().pods.clone();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = files.changed() => {
                if r.is_err() { return }
                statics = files.borrow_and_update().pods.clone();
            }
            r = api.changed() => if r.is_err() { return },
            _ = retry.tick() => {}
        }
        let view = api.borrow_and_update().clone();
        if !view.synced {
            continue;
        }
        let todo = plan(&statics, &view);
        if todo.create.is_empty() && todo.delete.is_empty() {
            continue;
        }
        if node_uid.is_empty() {
            match nodes.get_opt(&link.node_name).await {
                Ok(Some(n)) => node_uid = n.metadata.uid.unwrap_or_default(),
                Ok(None) => continue, // not registered yet
                Err(e) => {
                    debug!(error = %e, "reading the Node for mirror pods failed; retrying");
                    continue;
                }
            }
        }
        for (key, uid) in todo.delete {
            let pods: Api<Pod> = Api::namespaced(link.client.clone(), &key.namespace);
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
                ..Default::default()
            };
            match pods.delete(&key.name, &dp).await {
                Ok(_) => info!(pod = %key, "deleted a mirror pod that no current static pod has"),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => warn!(pod = %key, error = %e, "deleting a mirror pod failed; retrying"),
            }
        }
        for key in todo.create {
            let Some(d) = statics.get(&key) else { continue };
            let pods: Api<Pod> = Api::namespaced(link.client.clone(), &key.namespace);
            match pods.create(&PostParams::default(), &mirror_of(d, &link.node_name, &node_uid)).await {
                Ok(_) => {
                    link.api_ok();
                    info!(pod = %key, "created the mirror pod of a static pod");
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {} // the old one is still going
                Err(e) => warn!(pod = %key, error = %e, "creating the mirror pod failed; retrying"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn static_pod(name: &str, uid: &str) -> DesiredPod {
        let pod: Pod = serde_yaml_ng::from_str(&format!(
            "metadata: {{name: {name}, namespace: default, uid: {uid}}}\nspec: {{containers: [{{name: c, image: i}}]}}"
        ))
        .unwrap();
        DesiredPod {
            key: PodKey::new("default", name),
            uid: uid.into(),
            pod: Arc::new(pod),
            source: crate::model::PodSource::File("/m/a.yaml".into()),
            doc: 0,
            warnings: vec![],
        }
    }

    fn mirror(name: &str, hash: &str, api_uid: &str, deleting: bool) -> (PodKey, Arc<Pod>) {
        let mut m = mirror_of(&static_pod(name, hash), "n1", "node-uid");
        m.metadata.uid = Some(api_uid.into());
        if deleting {
            m.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
        }
        (PodKey::new("default", name), Arc::new(m))
    }

    #[test]
    fn mirror_pods_follow_the_static_pods() {
        let statics: BTreeMap<PodKey, DesiredPod> = [("a", "u1"), ("b", "u2"), ("c", "u3"), ("d", "u4")]
            .iter()
            .map(|(n, u)| (PodKey::new("default", *n), static_pod(n, u)))
            .collect();
        let mut api = ApiPods { synced: true, pods: BTreeMap::new() };
        api.pods.extend([
            mirror("a", "u1", "m1", false),    // current
            mirror("b", "old", "m2", false),   // stale: replaced
            mirror("c", "u3", "m3", true),     // deleted by someone: replaced
            mirror("gone", "u9", "m9", false), // manifest removed
        ]);
        let got = plan(&statics, &api);
        let key = |n: &str| PodKey::new("default", n);
        assert_eq!(got.create, vec![key("b"), key("c"), key("d")]);
        assert_eq!(
            got.delete,
            vec![(key("b"), "m2".to_string()), (key("c"), "m3".to_string()), (key("gone"), "m9".to_string())]
        );
        let m = mirror_of(&statics[&key("a")], "n1", "node-uid");
        let ann = m.metadata.annotations.unwrap();
        assert_eq!(ann[MIRROR], "u1");
        assert_eq!(ann["kubernetes.io/config.source"], "file");
        let owner = &m.metadata.owner_references.unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("Node", "n1", Some(true)));
        assert_eq!(m.spec.unwrap().node_name.as_deref(), Some("n1"));
    }
}
