//! Events to the API server: what the registry records for a pod (the reasons the control
//! socket shows) becomes a `v1` Event on the pod, so `kubectl describe pod` shows it. As the
//! kubelet's recorder: a repeat of the same event bumps its count (one PATCH, not a new Event),
//! and each pod has a token bucket (burst 25, one more every 5 minutes) so a crash loop cannot
//! flood the API server. Events about a static pod wait for its mirror pod.

use std::collections::{BTreeMap, HashMap, VecDeque};
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
use crate::model::PodKey;
use crate::registry::{Event, NodeEvent, Registry};

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

/// Events about pods the API does not show yet (a static pod before its mirror pod is made):
/// held in order until it does, at most a bucket's worth per pod, and for at most [`HOLD`].
/// Sending them is what the kubelet does; dropping them would lose a static pod's first
/// Pulled, Created and Started whenever its mirror pod is made after its containers start.
#[derive(Default)]
struct Held {
    pods: BTreeMap<PodKey, (Instant, VecDeque<Event>)>,
}

/// How long events wait for their pod's object.
const HOLD: Duration = Duration::from_secs(300);

impl Held {
    fn hold(&mut self, e: Event, now: Instant) {
        let (_, events) = self.pods.entry(e.pod.clone()).or_insert_with(|| (now, VecDeque::new()));
        events.push_back(e);
        if events.len() > BURST as usize {
            events.pop_front();
        }
    }

    fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The held events whose pod `uid_of` now knows, each pod's in order, with the pod's UID;
    /// drops those held longer than [`HOLD`].
    fn release(&mut self, now: Instant, uid_of: impl Fn(&PodKey) -> Option<String>) -> Vec<(String, Event)> {
        let mut out = Vec::new();
        self.pods.retain(|key, (since, events)| match uid_of(key) {
            Some(uid) => {
                out.extend(events.drain(..).map(|e| (uid.clone(), e)));
                false
            }
            None if now.duration_since(*since) < HOLD => true,
            None => {
                debug!(pod = %key, dropped = events.len(), "the pod's object never came; its events are dropped");
                false
            }
        });
        out
    }
}

/// Sends the registry's events to the API server until cancelled.
pub async fn run(
    link: Arc<ClusterLink>,
    registry: Registry,
    mut api: watch::Receiver<ApiPods>,
    cancel: CancellationToken,
) {
    let mut rx = registry.subscribe();
    let mut node_rx = registry.subscribe_node();
    let mut held = Held::default();
    let mut sender = Sender { link, buckets: HashMap::new(), created: BTreeMap::new() };
    // What the node recorded before this sender listened (the eviction manager's first cycle
    // and its pressure transitions run before the API server is reached). One recorded in
    // between comes twice: the second create finds the first (same name) and counts as made.
    for e in registry.node_events() {
        sender.send_node(&e).await;
    }
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = rx.recv() => match r {
                Ok(e) => held.hold(e, Instant::now()),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    debug!(dropped = n, "events came faster than they could be sent; some were dropped");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            r = node_rx.recv() => match r {
                Ok(e) => {
                    sender.send_node(&e).await;
                    continue;
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    debug!(dropped = n, "node events came faster than they could be sent; some were dropped");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            // The pod object an event waits for may be there now.
            r = api.changed() => {
                if r.is_err() {
                    return;
                }
                if held.is_empty() {
                    continue;
                }
            }
        }
        // The pod object each event is about: the API pod, or a static pod's mirror.
        let ready = {
            let view = api.borrow_and_update();
            held.release(Instant::now(), |key| view.pods.get(key).and_then(|p| p.metadata.uid.clone()))
        };
        for (uid, e) in ready {
            sender.send(uid, e).await;
        }
    }
}

/// What sending needs to remember.
struct Sender {
    link: Arc<ClusterLink>,
    buckets: HashMap<String, Bucket>,
    /// The Event already created for (pod uid, container, reason, message); a node event's is
    /// ("", its type, reason, message).
    created: BTreeMap<(String, Option<String>, String, String), String>,
}

/// The API Event for an event about the node: on the Node, in namespace `default`, with the
/// node's name as its UID (the kubelet's node reference).
pub fn node_api_event(e: &NodeEvent, node: &str, name: &str) -> ApiEvent {
    ApiEvent {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            uid: Some(node.to_string()),
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

impl Sender {
    /// Sends an event about the node (image garbage collection's, the eviction manager's, the
    /// pressure transitions: at most a few a monitoring period): a new Event, or a repeat's
    /// count on the one made (`EvictionThresholdMet` repeats every cycle under pressure).
    async fn send_node(&mut self, e: &NodeEvent) {
        let node = self.link.node_name.clone();
        let events: Api<ApiEvent> = Api::namespaced(self.link.events.clone(), "default");
        let id = (String::new(), Some(e.kind.to_string()), e.reason.clone(), e.message.clone());
        if e.count > 1
            && let Some(name) = self.created.get(&id)
        {
            let patch = serde_json::json!({ "count": e.count, "lastTimestamp": Time(e.time) });
            match events.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => return,
                Err(err) => debug!(error = %err, "updating a node event failed; creating it anew"),
            }
        }
        let name = format!("{node}.{:x}", e.time.as_nanosecond());
        match events.create(&PostParams::default(), &node_api_event(e, &node, &name)).await {
            Ok(_) => {
                self.created.insert(id, name);
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                self.created.insert(id, name);
            }
            Err(err) => debug!(error = %err, reason = %e.reason, "sending a node event failed"),
        }
    }

    /// Sends `e` about the pod object `uid`: a new Event, or a repeat's count on the one made.
    async fn send(&mut self, uid: String, e: Event) {
        let now = Instant::now();
        let bucket = self.buckets.entry(uid.clone()).or_insert(Bucket { tokens: BURST, at: now });
        if !bucket.take(now) {
            return;
        }
        let events: Api<ApiEvent> = Api::namespaced(self.link.events.clone(), &e.pod.namespace);
        let id = (uid.clone(), e.container.clone(), e.reason.clone(), e.message.clone());
        if e.count > 1 {
            if let Some(name) = self.created.get(&id) {
                let patch = serde_json::json!({ "count": e.count, "lastTimestamp": Time(e.time) });
                match events.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => return,
                    Err(err) => debug!(error = %err, "updating an event failed; creating it anew"),
                }
            }
        }
        let name = format!("{}.{:x}", e.pod.name, e.time.as_nanosecond());
        match events.create(&PostParams::default(), &api_event(&e, &uid, &self.link.node_name, &name)).await {
            Ok(_) => {
                self.created.insert(id, name);
                if self.created.len() > 4096 {
                    self.created.pop_first();
                }
            }
            Err(err) => debug!(error = %err, pod = %e.pod, reason = %e.reason, "sending an event failed"),
        }
        self.buckets.retain(|_, b| now.duration_since(b.at) < REFILL * 25);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_event_is_about_the_node_in_default() {
        let e = NodeEvent {
            time: jiff::Timestamp::UNIX_EPOCH,
            first_time: jiff::Timestamp::UNIX_EPOCH,
            kind: "Warning",
            reason: "FreeDiskSpaceFailed".into(),
            message: "m".into(),
            count: 1,
        };
        let a = node_api_event(&e, "n1", "n1.1");
        assert_eq!(a.metadata.namespace.as_deref(), Some("default"));
        let o = &a.involved_object;
        let got = (o.kind.as_deref(), o.name.as_deref(), o.uid.as_deref(), o.namespace.as_deref());
        assert_eq!(got, (Some("Node"), Some("n1"), Some("n1"), None), "the kubelet's node reference");
        assert_eq!((a.type_.as_deref(), a.reason.as_deref()), (Some("Warning"), Some("FreeDiskSpaceFailed")));
    }

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

    fn event(pod: &str, reason: &str) -> Event {
        let t: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        Event {
            time: t,
            first_time: t,
            kind: "Normal",
            reason: reason.into(),
            pod: crate::model::PodKey::new("ns", pod),
            container: None,
            message: String::new(),
            count: 1,
        }
    }

    #[test]
    fn events_wait_for_their_pod_object_in_order_and_not_forever() {
        let t0 = Instant::now();
        let mut held = Held::default();
        for (pod, reason) in [("a", "Pulled"), ("b", "Pulled"), ("a", "Created"), ("a", "Started")] {
            held.hold(event(pod, reason), t0);
        }
        let released = |held: &mut Held, at: Instant, known: &[&str]| -> Vec<(String, String)> {
            held.release(at, |k| known.contains(&k.name.as_str()).then(|| format!("uid-{}", k.name)))
                .into_iter()
                .map(|(uid, e)| (uid, e.reason))
                .collect()
        };
        let s =
            |v: &[(&str, &str)]| v.iter().map(|(u, r)| (u.to_string(), r.to_string())).collect::<Vec<_>>();
        // (when, pods the API shows, released)
        let cases: [(Instant, &[&str], Vec<(String, String)>); 4] = [
            (t0, &[], vec![]),
            (t0, &["a"], s(&[("uid-a", "Pulled"), ("uid-a", "Created"), ("uid-a", "Started")])),
            (t0, &["a"], vec![]),
            (t0 + HOLD, &["a"], vec![]),
        ];
        for (i, (at, known, want)) in cases.into_iter().enumerate() {
            assert_eq!(released(&mut held, at, known), want, "case {i}");
        }
        assert!(held.is_empty(), "b waited longer than HOLD: dropped");
    }

    #[test]
    fn a_pod_holds_at_most_a_bucket_of_events_the_newest() {
        let t0 = Instant::now();
        let mut held = Held::default();
        for i in 0..(BURST as usize + 5) {
            held.hold(event("a", &format!("r{i}")), t0);
        }
        let out = held.release(t0, |_| Some("u".into()));
        assert_eq!(out.len(), BURST as usize);
        assert_eq!(out[0].1.reason, "r5", "the oldest went first");
    }
}
