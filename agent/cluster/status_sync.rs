//! The status writer: what the workers publish for API pods goes to `pods/status`, as the
//! kubelet's status manager does it: only on change, the newest status of each pod (bursts
//! coalesce), the conditions the node owns merged by type (a controller's readiness-gate
//! condition is kept), the pod's UID as precondition, and retried until it lands.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::ClusterLink;
use super::merge::{NODE_OWNED, Rejections};
use super::pods::{ApiPods, is_api_source};
use crate::registry::Registry;

/// How soon a failed write is tried again (and at most how long a coalesced burst waits).
const RETRY: Duration = Duration::from_secs(1);

/// The strategic-merge patch of a pod's status as the node reports it; `None` fields are left
/// out, conditions the node does not own are not sent (the API server keeps them).
pub fn status_patch(uid: &str, status: &PodStatus) -> Value {
    let mut s = status.clone();
    if let Some(conds) = s.conditions.as_mut() {
        conds.retain(|c| NODE_OWNED.contains(&c.type_.as_str()));
    }
    // Not the node's to write (the scheduler's, and the API server's).
    s.nominated_node_name = None;
    s.resize = None;
    let mut v = serde_json::to_value(&s).unwrap_or_default();
    // Conditions merge by type: a field the node no longer sets must be sent as null, or the
    // API server keeps the old one (a Ready=True with the reason of its False).
    if let Some(conds) = v.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conds.iter_mut().filter_map(Value::as_object_mut) {
            for field in ["reason", "message"] {
                c.entry(field).or_insert(Value::Null);
            }
        }
    }
    if let Some(obj) = v.as_object_mut() {
        for field in ["reason", "message"] {
            obj.entry(field).or_insert(Value::Null);
        }
    }
    json!({ "metadata": { "uid": uid }, "status": v })
}

/// The patch that fails a pod refused at admission.
pub fn rejection_patch(uid: &str, reason: &str, message: &str) -> Value {
    json!({ "metadata": { "uid": uid }, "status": { "phase": "Failed", "reason": reason, "message": message } })
}

/// Runs until cancelled.
pub async fn run(
    link: Arc<ClusterLink>,
    registry: Registry,
    mut api: watch::Receiver<ApiPods>,
    mut rejections: watch::Receiver<Rejections>,
    cancel: CancellationToken,
) {
    let mut changes = registry.pod_changes();
    // The last patch that landed, by pod UID.
    let mut sent: BTreeMap<String, Value> = BTreeMap::new();
    let mut retry;
    loop {
        let current = api.borrow_and_update().clone();
        let mut wanted: BTreeMap<String, (String, String, Value)> = BTreeMap::new();
        for record in registry.pods() {
            let Some(status) = record.pod.status.as_ref() else { continue };
            let uid = record.pod.metadata.uid.clone().unwrap_or_default();
            let key = super::pods::key_of(&record.pod);
            let Some(in_api) = current.pods.get(&key) else { continue };
            // An API pod's status goes to itself; a static pod's to its current mirror pod.
            let target = if is_api_source(&record.manifest_file) {
                (in_api.metadata.uid.as_deref() == Some(uid.as_str())).then(|| uid.clone())
            } else {
                let hash = in_api.metadata.annotations.as_ref().and_then(|a| a.get(super::mirror::MIRROR));
                (hash == Some(&uid)).then(|| in_api.metadata.uid.clone()).flatten()
            };
            if let Some(target) = target {
                let patch = status_patch(&target, status);
                wanted.insert(target, (key.namespace, key.name, patch));
            }
        }
        for (uid, (key, r)) in rejections.borrow_and_update().iter() {
            wanted.insert(
                uid.clone(),
                (key.namespace.clone(), key.name.clone(), rejection_patch(uid, &r.reason, &r.message)),
            );
        }
        sent.retain(|uid, _| wanted.contains_key(uid));
        retry = false;
        for (uid, (ns, name, patch)) in wanted {
            if sent.get(&uid) == Some(&patch) {
                continue;
            }
            let pods: Api<Pod> = Api::namespaced(link.client.clone(), &ns);
            match pods.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
                Ok(_) => {
                    debug!(pod = %format!("{ns}/{name}"), "pod status written");
                    link.api_ok();
                    sent.insert(uid, patch);
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                    // Gone, or another pod of that name now: nothing to write any more.
                    debug!(pod = %format!("{ns}/{name}"), code = s.code, "pod status not written: the pod is gone");
                    sent.insert(uid, patch);
                }
                Err(e) => {
                    warn!(pod = %format!("{ns}/{name}"), error = %e, "writing pod status failed; retrying");
                    link.api_failed(&e.to_string());
                    retry = true;
                    break;
                }
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = changes.changed() => if r.is_err() { return },
            r = rejections.changed() => if r.is_err() { return },
            // A pod (or a new mirror pod) the API did not have before may need its status.
            r = api.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(RETRY), if retry => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ContainerStatus;

    use super::*;

    /// KEP-4960: the effective stop signal goes to the API server with the container status
    /// (it keeps it only when its ContainerStopSignals gate is on, alpha in 1.36); a container
    /// whose runtime reports none sends none.
    #[test]
    fn the_status_patch_carries_the_stop_signal() {
        let status = PodStatus {
            container_statuses: Some(vec![
                ContainerStatus {
                    name: "a".into(),
                    stop_signal: Some("SIGUSR1".into()),
                    ..Default::default()
                },
                ContainerStatus { name: "b".into(), ..Default::default() },
            ]),
            ..Default::default()
        };
        let patch = status_patch("u1", &status);
        let cs = &patch["status"]["containerStatuses"];
        assert_eq!(cs[0]["stopSignal"], "SIGUSR1", "{patch:#}");
        assert!(cs[1].get("stopSignal").is_none(), "{patch:#}");
    }
}
