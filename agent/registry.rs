//! What the agent currently knows about each pod, for the control API: the pod (spec + computed
//! status), where it came from, and a bounded log of events. Pod workers write; the API reads.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use tokio::sync::{Notify, broadcast};

use crate::model::PodKey;

/// How many events the agent keeps in memory (oldest dropped first).
const EVENT_CAPACITY: usize = 2000;

/// One pod as the control API shows it.
#[derive(Debug, Clone)]
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

/// Shared, cheaply cloned handle to the agent's view of pods and events.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    pods: RwLock<BTreeMap<PodKey, PodRecord>>,
    events: Mutex<VecDeque<Event>>,
    event_tx: broadcast::Sender<Event>,
    /// Conditions set from outside (readiness gates), by pod.
    external_conditions: RwLock<BTreeMap<PodKey, Vec<PodCondition>>>,
    /// Pod workers to wake when an outside condition of their pod changes.
    wakers: Mutex<BTreeMap<PodKey, Arc<Notify>>>,
}

impl Default for Registry {
    fn default() -> Self {
        let (event_tx, _) = broadcast::channel(256);
        Self {
            inner: Arc::new(Inner {
                pods: RwLock::default(),
                events: Mutex::default(),
                event_tx,
                external_conditions: RwLock::default(),
                wakers: Mutex::default(),
            }),
        }
    }
}

impl Registry {
    /// Replaces what is known about one pod.
    pub fn put_pod(&self, key: PodKey, record: PodRecord) {
        if let Ok(mut pods) = self.inner.pods.write() {
            pods.insert(key, record);
        }
    }

    /// Forgets a pod (after it has terminated and its sandbox is gone).
    pub fn remove_pod(&self, key: &PodKey) {
        if let Ok(mut pods) = self.inner.pods.write() {
            pods.remove(key);
        }
        if let Ok(mut c) = self.inner.external_conditions.write() {
            c.remove(key);
        }
    }

    pub fn pod(&self, key: &PodKey) -> Option<PodRecord> {
        self.inner.pods.read().ok()?.get(key).cloned()
    }

    pub fn pods(&self) -> Vec<PodRecord> {
        self.inner.pods.read().map(|p| p.values().cloned().collect()).unwrap_or_default()
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

    pub fn external_conditions(&self, pod: &PodKey) -> Vec<PodCondition> {
        self.inner.external_conditions.read().ok().and_then(|m| m.get(pod).cloned()).unwrap_or_default()
    }
}
