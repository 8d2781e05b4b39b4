//! Events to the API server: what the registry records for a pod (the reasons the control
//! socket shows) becomes a `v1` Event on the pod, so `kubectl describe pod` shows it. As the
//! kubelet's recorder: a repeat of the same event bumps its count (one PATCH, not a new Event),
//! and each pod has a token bucket (burst 25, one more every 5 minutes) so a crash loop cannot
//! flood the API server.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event as ApiEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::ClusterLink;
use super::pods::ApiPods;
use crate::registry::{Event, Registry};

const BURST: f64 = 25.0;
const REFILL: Duration = Duration::from_secs(300);

/// A per-pod token bucket (the kubelet's event spam filter).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn take(&mut self, now: Instant) -> bool {
        let refill = now.duration_since(self.at).as_secs_f64() / REFILL.as_secs_f64();
        self.tokens = (self.tokens + refill).min(BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The API Event for a registry event about the pod `(namespace, name, uid)`.
pub fn api_event(e: &Event, pod_uid: &str, node: &str, name: &str) -> ApiEvent {
    let field_path = e.container.as_ref().map(|c| format!("spec.containers{{{c}}}"));
    ApiEvent {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(e.pod.namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(e.pod.name.clone()),
            namespace: Some(e.pod.namespace.clone()),
            uid: Some(pod_uid.to_string()),
            field_path,
            ..Default::default()
        },
        reason: Some(e.reason.clone()),
        message: Some(e.message.clone()),
        type_: Some(e.kind.to_string()),
        count: Some(i32::try_from(e.count).unwrap_or(i32::MAX)),
        first_timestamp: Some(Time(e.first_time)),
        last_timestamp: Some(Time(e.time)),
        source: Some(EventSource { component: Some("kubelet".into()), host: Some(node.to_string()) }),
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some(node.to_string()),
        ..Default::default()
    }
}

/// Sends the registry's events to the API server until cancelled.
pub async fn run(
    link: Arc<ClusterLink>,
    registry: Registry,
    api: watch::Receiver<ApiPods>,
    cancel: CancellationToken,
) {
    let mut rx = registry.subscribe();
    let mut buckets: HashMap<String, Bucket> = HashMap::new();
    // The Event already created for (pod uid, container, reason, message).
    let mut created: BTreeMap<(String, Option<String>, String, String), String> = BTreeMap::new();
    loop {
        let e = tokio::select! {
            _ = cancel.cancelled() => return,
            r = rx.recv() => match r {
                Ok(e) => e,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    debug!(dropped = n, "events came faster than they could be sent; some were dropped");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        // The pod object the event is about: the API pod, or a static pod's mirror.
        let uid = {
            let view = api.borrow();
            view.pods.get(&e.pod).and_then(|p| p.metadata.uid.clone())
        };
        let Some(uid) = uid else { continue };
        let now = Instant::now();
        let bucket = buckets.entry(uid.clone()).or_insert(Bucket { tokens: BURST, at: now });
        if !bucket.take(now) {
            continue;
        }
        let events: Api<ApiEvent> = Api::namespaced(link.events.clone(), &e.pod.namespace);
        let id = (uid.clone(), e.container.clone(), e.reason.clone(), e.message.clone());
        if e.count > 1 {
            if let Some(name) = created.get(&id) {
                let patch = serde_json::json!({ "count": e.count, "lastTimestamp": Time(e.time) });
                match events.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => continue,
                    Err(err) => debug!(error = %err, "updating an event failed; creating it anew"),
                }
            }
        }
        let name = format!("{}.{:x}", e.pod.name, e.time.as_nanosecond());
        match events.create(&PostParams::default(), &api_event(&e, &uid, &link.node_name, &name)).await {
            Ok(_) => {
                created.insert(id, name);
                if created.len() > 4096 {
                    created.pop_first();
                }
            }
            Err(err) => debug!(error = %err, pod = %e.pod, reason = %e.reason, "sending an event failed"),
        }
        buckets.retain(|_, b| now.duration_since(b.at) < REFILL * 25);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_a_burst_then_one_per_refill() {
        let t0 = Instant::now();
        let mut b = Bucket { tokens: BURST, at: t0 };
        let taken = (0..40).filter(|_| b.take(t0)).count();
        assert_eq!(taken, 25);
        assert!(!b.take(t0 + Duration::from_secs(100)), "a third of a token is not enough");
        assert!(b.take(t0 + REFILL), "one token after the refill period");
        assert!(!b.take(t0 + REFILL));
    }

    #[test]
    fn the_event_names_the_pod_and_container_as_the_kubelet_does() {
        let t: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let e = Event {
            time: t,
            first_time: t,
            kind: "Normal",
            reason: "Started".into(),
            pod: crate::model::PodKey::new("ns", "web"),
            container: Some("app".into()),
            message: "Started container app".into(),
            count: 3,
        };
        let a = api_event(&e, "u1", "n1", "web.1");
        assert_eq!(a.involved_object.field_path.as_deref(), Some("spec.containers{app}"));
        assert_eq!(a.involved_object.uid.as_deref(), Some("u1"));
        assert_eq!(a.source.unwrap().host.as_deref(), Some("n1"));
        assert_eq!((a.count, a.type_.as_deref()), (Some(3), Some("Normal")));
    }
}
