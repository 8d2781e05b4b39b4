//! What the agent currently knows about each pod, for the control API: the pod (spec + computed
//! status), where it came from, a bounded log of events, each pod's lifecycle timeline, and
//! whether the container runtime answers. Pod workers and the PLEG write; the API reads.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use k8s_openapi::api::core::v1::{NodeCondition, Pod, PodCondition};
use tokio::sync::{Notify, broadcast, watch};

use crate::model::PodKey;
use crate::timeline::{Step, Timeline};

/// How many events the agent keeps in memory (oldest dropped first).
const EVENT_CAPACITY: usize = 2000;

/// One pod as the control API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRecord {
    /// Spec and the status computed from the runtime at the last sync.
    pub pod: Pod,
    pub manifest_file: String,
    pub warnings: Vec<String>,
}

/// An event, as `crilet describe` and `crilet events` print it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The newest occurrence, and the first of the repeats counted in `count`.
    pub time: jiff::Timestamp,
    pub first_time: jiff::Timestamp,
    /// `Normal` or `Warning`.
    pub kind: &'static str,
    pub reason: String,
    pub pod: PodKey,
    /// Set when the event is about one container.
    pub container: Option<String>,
    pub message: String,
    /// How many times this event (same pod, container, reason, message) happened in a row.
    pub count: u32,
}

/// An event about the node itself (image garbage collection's, the eviction manager's and the
/// pressure conditions' transitions), which the kubelet records on its Node object; kept in a
/// short ring (`crilet events` shows them as `Node/<name>`) and, in cluster mode, sent as an
/// Event on the Node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeEvent {
    /// The newest occurrence, and the first of the repeats counted in `count`.
    pub time: jiff::Timestamp,
    pub first_time: jiff::Timestamp,
    /// `Normal` or `Warning`.
    pub kind: &'static str,
    pub reason: String,
    pub message: String,
    /// How many times it happened (the eviction manager's `EvictionThresholdMet` repeats every
    /// cycle under pressure; a repeat counts, as the kubelet's event correlator does).
    pub count: u32,
}

/// How many node events the agent keeps in memory.
const NODE_EVENT_CAPACITY: usize = 100;

/// Whether the container runtime answers the agent, as the PLEG's relist finds it. While it is
/// unavailable, the published pod statuses are the last ones observed.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeHealth {
    pub available: bool,
    /// When the runtime last became available (or the agent started) or unavailable.
    pub since: jiff::Timestamp,
    /// While unavailable: the newest failure; empty while available.
    pub last_error: String,
}

impl Default for RuntimeHealth {
    fn default() -> Self {
        Self { available: true, since: jiff::Timestamp::now(), last_error: String::new() }
    }
}

/// Event reasons of the runtime's health, recorded on every pod when it changes.
pub const RUNTIME_UNAVAILABLE: &str = "RuntimeUnavailable";
pub const RUNTIME_AVAILABLE: &str = "RuntimeAvailable";

/// Shared, cheaply cloned handle to the agent's view of pods and events.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

/// A pod's record and the revision it was put at.
struct Stored {
    record: PodRecord,
    revision: u64,
}

struct Inner {
    pods: RwLock<BTreeMap<PodKey, Stored>>,
    events: Mutex<VecDeque<Event>>,
    event_tx: broadcast::Sender<Event>,
    node_events: Mutex<VecDeque<NodeEvent>>,
    node_event_tx: broadcast::Sender<NodeEvent>,
    /// The node's pressure conditions, as the eviction manager last set them.
    node_conditions: Mutex<Vec<NodeCondition>>,
    /// Conditions set from outside (readiness gates), by pod.
    external_conditions: RwLock<BTreeMap<PodKey, Vec<PodCondition>>>,
    /// Pod workers to wake when an outside condition of their pod changes.
    wakers: Mutex<BTreeMap<PodKey, Arc<Notify>>>,
    runtime: Mutex<RuntimeHealth>,
    liveness: crate::health::Liveness,
    /// Each pod's lifecycle steps, for `describe` (dropped with the pod).
    timelines: Mutex<BTreeMap<PodKey, Timeline>>,
    /// Bumped whenever a put changes a pod's record or a pod is removed (the cluster status
    /// writer waits on it); a changed record's revision is the value it was bumped to.
    changes: watch::Sender<u64>,
    /// Cluster mode: whether the API server answers (`None` without a kubeconfig).
    api: Mutex<Option<ApiHealth>>,
}

/// Whether the API server answers the agent (cluster mode).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiHealth {
    pub reachable: bool,
    /// When it last became reachable or unreachable.
    pub since: jiff::Timestamp,
    pub last_error: String,
}

impl Default for Registry {
    fn default() -> Self {
        let (event_tx, _) = broadcast::channel(256);
        let (node_event_tx, _) = broadcast::channel(16);
        Self {
            inner: Arc::new(Inner {
                pods: RwLock::default(),
                events: Mutex::default(),
                event_tx,
                node_events: Mutex::default(),
                node_event_tx,
                node_conditions: Mutex::default(),
                external_conditions: RwLock::default(),
                wakers: Mutex::default(),
                runtime: Mutex::default(),
                liveness: crate::health::Liveness::default(),
                timelines: Mutex::default(),
                changes: watch::channel(0).0,
                api: Mutex::default(),
            }),
        }
    }
}

impl Registry {
    /// Replaces what is known about one pod. A record equal to the one there changes nothing:
    /// a sync that found the pod as it was wakes no reader.
    pub fn put_pod(&self, key: PodKey, record: PodRecord) {
        let Ok(mut pods) = self.inner.pods.write() else { return };
        if pods.get(&key).is_some_and(|s| s.record == record) {
            return;
        }
        let mut revision = 0;
        self.inner.changes.send_modify(|n| {
            *n = n.wrapping_add(1);
            revision = *n;
        });
        pods.insert(key, Stored { record, revision });
    }

    /// Each pod's key and the revision of its record (a newer put that changed it, a higher
    /// one), so a reader can redo its work for the changed pods only.
    pub fn pod_revisions(&self) -> Vec<(PodKey, u64)> {
        self.inner
            .pods
            .read()
            .map(|p| p.iter().map(|(k, s)| (k.clone(), s.revision)).collect())
            .unwrap_or_default()
    }

    /// One pod's revision, without its record.
    pub fn pod_revision(&self, key: &PodKey) -> Option<u64> {
        self.inner.pods.read().ok()?.get(key).map(|s| s.revision)
    }

    /// One pod's record with its revision.
    pub fn pod_at_revision(&self, key: &PodKey) -> Option<(u64, PodRecord)> {
        self.inner.pods.read().ok()?.get(key).map(|s| (s.revision, s.record.clone()))
    }

    /// Changes whenever a pod's record changes or a pod is removed.
    pub fn pod_changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Cluster mode: the API server answered (`ok`) or failed with `error`.
    pub fn set_api_health(&self, ok: bool, error: &str) {
        let Ok(mut h) = self.inner.api.lock() else { return };
        match h.as_mut() {
            Some(cur) if cur.reachable == ok => {
                if !ok {
                    cur.last_error = error.to_string();
                }
            }
            _ => {
                *h = Some(ApiHealth {
                    reachable: ok,
                    since: jiff::Timestamp::now(),
                    last_error: error.to_string(),
                })
            }
        }
    }

    /// Cluster mode: whether the API server answers; `None` without a kubeconfig.
    pub fn api_health(&self) -> Option<ApiHealth> {
        self.inner.api.lock().ok().and_then(|h| h.clone())
    }

    /// Forgets a pod (after it has terminated and its sandbox is gone).
    pub fn remove_pod(&self, key: &PodKey) {
        if let Ok(mut pods) = self.inner.pods.write() {
            pods.remove(key);
        }
        if let Ok(mut c) = self.inner.external_conditions.write() {
            c.remove(key);
        }
        if let Ok(mut t) = self.inner.timelines.lock() {
            t.remove(key);
        }
        self.inner.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Adds a lifecycle step of one container of the pod (`None`: of the pod itself).
    pub fn add_step(&self, pod: &PodKey, container: Option<&str>, step: Step) {
        if let Ok(mut t) = self.inner.timelines.lock() {
            t.entry(pod.clone()).or_default().add(container, step);
        }
    }

    /// The pod's lifecycle steps: the pod's own, then each container's, in time order.
    pub fn timeline(&self, pod: &PodKey) -> Vec<(Option<String>, Step)> {
        self.inner.timelines.lock().ok().and_then(|t| t.get(pod).map(Timeline::entries)).unwrap_or_default()
    }

    pub fn pod(&self, key: &PodKey) -> Option<PodRecord> {
        self.inner.pods.read().ok()?.get(key).map(|s| s.record.clone())
    }

    pub fn pods(&self) -> Vec<PodRecord> {
        self.inner.pods.read().map(|p| p.values().map(|s| s.record.clone()).collect()).unwrap_or_default()
    }

    /// How many pods there are, and how many of them `pred` holds for, without copying them.
    pub fn count_pods(&self, pred: impl Fn(&Pod) -> bool) -> (usize, usize) {
        self.inner
            .pods
            .read()
            .map(|p| (p.len(), p.values().filter(|s| pred(&s.record.pod)).count()))
            .unwrap_or_default()
    }

    /// Records an event; a repeat of the newest event for the same object bumps its count.
    pub fn record(
        &self,
        kind: &'static str,
        pod: &PodKey,
        container: Option<&str>,
        reason: &str,
        message: String,
    ) {
        let now = jiff::Timestamp::now();
        let mut ev = Event {
            time: now,
            first_time: now,
            kind,
            reason: reason.to_string(),
            pod: pod.clone(),
            container: container.map(str::to_string),
            message,
            count: 1,
        };
        let Ok(mut events) = self.inner.events.lock() else { return };
        if let Some(last) = events.iter_mut().rev().find(|e| e.pod == ev.pod && e.container == ev.container) {
            if last.reason == ev.reason && last.message == ev.message && last.kind == ev.kind {
                last.count += 1;
                last.time = ev.time;
                // first_time stays: it is when this run of repeats began.
                ev = last.clone();
                let _ = self.inner.event_tx.send(ev);
                return;
            }
        }
        if events.len() >= EVENT_CAPACITY {
            events.pop_front();
        }
        events.push_back(ev.clone());
        let _ = self.inner.event_tx.send(ev);
    }

    /// Records an event about the node (not about a pod). A repeat of one already kept (same
    /// type, reason and message) bumps its count and time and moves it last: the node's
    /// repeated events (`EvictionThresholdMet` every cycle) interleave with others.
    pub fn record_node(&self, kind: &'static str, reason: &str, message: String) {
        let now = jiff::Timestamp::now();
        let mut ev =
            NodeEvent { time: now, first_time: now, kind, reason: reason.to_string(), message, count: 1 };
        if let Ok(mut events) = self.inner.node_events.lock() {
            let same = |e: &NodeEvent| e.kind == ev.kind && e.reason == ev.reason && e.message == ev.message;
            if let Some(i) = events.iter().rposition(same) {
                let mut last = events.remove(i).unwrap_or_else(|| ev.clone());
                last.count += 1;
                last.time = now;
                ev = last;
            } else if events.len() >= NODE_EVENT_CAPACITY {
                events.pop_front();
            }
            events.push_back(ev.clone());
        }
        let _ = self.inner.node_event_tx.send(ev);
    }

    /// Sets the node's pressure conditions (the eviction manager, every cycle).
    pub fn set_node_conditions(&self, conditions: Vec<NodeCondition>) {
        if let Ok(mut c) = self.inner.node_conditions.lock() {
            *c = conditions;
        }
    }

    /// The node's pressure conditions (empty until the eviction manager first sets them).
    pub fn node_conditions(&self) -> Vec<NodeCondition> {
        self.inner.node_conditions.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// The node's events so far, oldest first.
    pub fn node_events(&self) -> Vec<NodeEvent> {
        self.inner.node_events.lock().map(|e| e.iter().cloned().collect()).unwrap_or_default()
    }

    /// New node events as they are recorded.
    pub fn subscribe_node(&self) -> broadcast::Receiver<NodeEvent> {
        self.inner.node_event_tx.subscribe()
    }

    /// Events so far, oldest first, optionally for one pod only.
    pub fn events(&self, pod: Option<&PodKey>) -> Vec<Event> {
        let Ok(events) = self.inner.events.lock() else { return Vec::new() };
        events.iter().filter(|e| pod.is_none_or(|p| &e.pod == p)).cloned().collect()
    }

    /// New events as they are recorded.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.event_tx.subscribe()
    }

    /// Sets (or with `None` status removes) a condition owned by an outside controller.
    pub fn set_external_condition(&self, pod: &PodKey, cond: PodCondition, remove: bool) {
        {
            let Ok(mut all) = self.inner.external_conditions.write() else { return };
            let list = all.entry(pod.clone()).or_default();
            list.retain(|c| c.type_ != cond.type_);
            if !remove {
                list.push(cond);
            }
        }
        let waker = self.inner.wakers.lock().ok().and_then(|w| w.get(pod).cloned());
        if let Some(n) = waker {
            n.notify_one();
        }
    }

    /// The pod worker of `pod` wants a wake when an outside condition changes.
    pub fn register_waker(&self, pod: &PodKey, notify: Arc<Notify>) {
        if let Ok(mut w) = self.inner.wakers.lock() {
            w.insert(pod.clone(), notify);
        }
    }

    /// The pod worker that registered `notify` has ended. Its entry goes, unless a newer worker
    /// of the same name has registered since: pod names churn in cluster mode, and the map must
    /// not keep one entry per name ever seen.
    pub fn unregister_waker(&self, pod: &PodKey, notify: &Arc<Notify>) {
        let Ok(mut w) = self.inner.wakers.lock() else { return };
        if w.get(pod).is_some_and(|n| Arc::ptr_eq(n, notify)) {
            w.remove(pod);
        }
    }

    pub fn external_conditions(&self, pod: &PodKey) -> Vec<PodCondition> {
        self.inner.external_conditions.read().ok().and_then(|m| m.get(pod).cloned()).unwrap_or_default()
    }

    /// The sync loop's and the relist's heartbeats (`/healthz`, the systemd watchdog).
    pub fn liveness(&self) -> &crate::health::Liveness {
        &self.inner.liveness
    }

    /// Whether the container runtime answers, as last reported.
    pub fn runtime_health(&self) -> RuntimeHealth {
        self.inner.runtime.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// The runtime failed to answer (`error` says how). The first failure after a healthy spell
    /// records a `RuntimeUnavailable` warning on every pod; later ones only update the error.
    pub fn runtime_unavailable(&self, error: &str) {
        let now = jiff::Timestamp::now();
        {
            let Ok(mut h) = self.inner.runtime.lock() else { return };
            h.last_error = error.to_string();
            if !h.available {
                return;
            }
            h.available = false;
            h.since = now;
        }
        let message = format!(
            "Container runtime is unavailable: {error}. Running containers are left as they are; \
             retrying"
        );
        for key in self.pod_keys() {
            self.record("Warning", &key, None, RUNTIME_UNAVAILABLE, message.clone());
        }
    }

    /// The runtime answers again: after an outage, records a `RuntimeAvailable` event on every pod.
    pub fn runtime_available(&self) {
        let now = jiff::Timestamp::now();
        let outage = {
            let Ok(mut h) = self.inner.runtime.lock() else { return };
            if h.available {
                return;
            }
            let outage = now.duration_since(h.since);
            *h = RuntimeHealth { available: true, since: now, last_error: String::new() };
            outage
        };
        let secs = outage.as_secs_f64();
        let message = format!("Container runtime is available again after {secs:.1}s");
        for key in self.pod_keys() {
            self.record("Normal", &key, None, RUNTIME_AVAILABLE, message.clone());
        }
    }

    fn pod_keys(&self) -> Vec<PodKey> {
        self.inner.pods.read().map(|p| p.keys().cloned().collect()).unwrap_or_default()
    }

    /// How many entries each per-pod map holds: pods, external conditions, wakers, timelines.
    #[cfg(test)]
    fn per_pod_sizes(&self) -> [usize; 4] {
        let i = &self.inner;
        [
            i.pods.read().map(|m| m.len()).unwrap_or_default(),
            i.external_conditions.read().map(|m| m.len()).unwrap_or_default(),
            i.wakers.lock().map(|m| m.len()).unwrap_or_default(),
            i.timelines.lock().map(|m| m.len()).unwrap_or_default(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repeated node event counts and moves last; a different message or type is a new one.
    #[test]
    fn node_event_repeats_count_and_move_last() {
        // (recorded: type, reason, message) -> the ring: (reason, message, count), oldest first
        let cases: Vec<(Vec<(&'static str, &str, &str)>, Vec<(&str, &str, u32)>)> = vec![
            (vec![("Warning", "A", "m")], vec![("A", "m", 1)]),
            (vec![("Warning", "A", "m"), ("Warning", "A", "m")], vec![("A", "m", 2)]),
            (
                vec![("Warning", "A", "m"), ("Normal", "B", "n"), ("Warning", "A", "m")],
                vec![("B", "n", 1), ("A", "m", 2)],
            ),
            (vec![("Warning", "A", "m"), ("Warning", "A", "other")], vec![("A", "m", 1), ("A", "other", 1)]),
            (vec![("Warning", "A", "m"), ("Normal", "A", "m")], vec![("A", "m", 1), ("A", "m", 1)]),
        ];
        for (i, (recorded, want)) in cases.into_iter().enumerate() {
            let registry = Registry::default();
            for (kind, reason, message) in recorded {
                registry.record_node(kind, reason, message.to_string());
            }
            let got: Vec<(String, String, u32)> =
                registry.node_events().into_iter().map(|e| (e.reason, e.message, e.count)).collect();
            let want: Vec<(String, String, u32)> =
                want.into_iter().map(|(r, m, c)| (r.to_string(), m.to_string(), c)).collect();
            assert_eq!(got, want, "case {i}");
            assert!(registry.node_events().iter().all(|e| e.first_time <= e.time), "case {i}");
        }
    }

    /// A put that changes nothing wakes no reader and keeps the revision; one that changes the
    /// record does both; a removal wakes readers too.
    #[test]
    fn only_a_changed_record_is_a_change() {
        let registry = Registry::default();
        let mut changes = registry.pod_changes();
        let key = PodKey::new("default", "web");
        let record = |phase: &str| {
            let mut pod = Pod::default();
            pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            });
            PodRecord { pod, manifest_file: "/m/web.yaml".into(), warnings: Vec::new() }
        };
        registry.put_pod(key.clone(), record("Pending"));
        assert!(changes.has_changed().unwrap(), "a new pod");
        changes.borrow_and_update();
        let (first, _) = registry.pod_at_revision(&key).unwrap();

        registry.put_pod(key.clone(), record("Pending"));
        assert!(!changes.has_changed().unwrap(), "the same record again");
        assert_eq!(registry.pod_revisions(), [(key.clone(), first)]);

        registry.put_pod(key.clone(), record("Running"));
        assert!(changes.has_changed().unwrap(), "a new status");
        changes.borrow_and_update();
        let (second, r) = registry.pod_at_revision(&key).unwrap();
        assert!(second > first, "{second} after {first}");
        assert_eq!(r.pod.status.unwrap().phase.as_deref(), Some("Running"));

        registry.remove_pod(&key);
        assert!(changes.has_changed().unwrap(), "a removal");
        assert!(registry.pod_revisions().is_empty());
    }

    /// Generated pod names (cluster mode) come and go: once each pod's worker has ended and the
    /// pod is removed, no per-pod map keeps anything of it.
    #[test]
    fn churned_pods_leave_nothing_behind() {
        let registry = Registry::default();
        let gate =
            PodCondition { type_: "example.com/gate".into(), status: "True".into(), ..Default::default() };
        for i in 0..300 {
            let key = PodKey::new("default", format!("web-7f9c4-{i:05}"));
            let wake = Arc::new(Notify::new());
            registry.register_waker(&key, wake.clone());
            let record =
                PodRecord { pod: Pod::default(), manifest_file: String::new(), warnings: Vec::new() };
            registry.put_pod(key.clone(), record);
            registry.set_external_condition(&key, gate.clone(), false);
            registry.add_step(&key, Some("app"), Step::now(crate::timeline::StepKind::Started, "c1", ""));
            assert_eq!(registry.per_pod_sizes(), [1, 1, 1, 1], "pod {i} while it runs");
            registry.remove_pod(&key);
            registry.unregister_waker(&key, &wake);
        }
        assert_eq!(registry.per_pod_sizes(), [0; 4]);
    }

    /// A new worker of the same pod name may register before the old one has unregistered: the
    /// old one's exit leaves the new one's waker in place.
    #[test]
    fn an_old_worker_leaves_a_newer_waker() {
        let registry = Registry::default();
        let key = PodKey::new("default", "web");
        let (old, new) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        registry.register_waker(&key, old.clone());
        registry.register_waker(&key, new.clone());
        registry.unregister_waker(&key, &old);
        assert_eq!(registry.per_pod_sizes()[2], 1, "the newer waker stays");
        registry.unregister_waker(&key, &new);
        assert_eq!(registry.per_pod_sizes()[2], 0);
    }

    #[test]
    fn runtime_health_transitions_are_recorded_once_per_pod() {
        let registry = Registry::default();
        let key = PodKey::new("default", "web");
        let record = PodRecord { pod: Pod::default(), manifest_file: String::new(), warnings: Vec::new() };
        registry.put_pod(key.clone(), record);
        assert!(registry.runtime_health().available);

        registry.runtime_available();
        assert!(registry.events(None).is_empty(), "available while available: nothing to say");

        registry.runtime_unavailable("connection refused");
        registry.runtime_unavailable("deadline exceeded");
        let h = registry.runtime_health();
        assert!(!h.available);
        assert_eq!(h.last_error, "deadline exceeded", "the newest failure is kept");
        let reasons: Vec<String> = registry.events(Some(&key)).into_iter().map(|e| e.reason).collect();
        assert_eq!(reasons, [RUNTIME_UNAVAILABLE], "one event per outage, not per failed relist");
        assert!(registry.events(None)[0].message.contains("connection refused"), "names the first failure");

        registry.runtime_available();
        registry.runtime_available();
        let h = registry.runtime_health();
        assert!(h.available && h.last_error.is_empty());
        let events = registry.events(Some(&key));
        let reasons: Vec<(&str, &str)> = events.iter().map(|e| (e.kind, e.reason.as_str())).collect();
        assert_eq!(reasons, [("Warning", RUNTIME_UNAVAILABLE), ("Normal", RUNTIME_AVAILABLE)]);
    }
}
